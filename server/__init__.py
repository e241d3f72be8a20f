"""server: serve.py's HTTP service: apis.py (requests and answers in TEI's, OpenAI's and
HuggingFace's formats), batcher.py (dynamic batches), app.py (the ASGI app, its metrics).
May import utils and the root libraries; starlette (the [serve] extra)."""
