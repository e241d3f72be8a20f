"""The import rule of CONTRIBUTING.md as a test: the package's modules, walked with `ast`
(every import, also those inside functions), form no cycle; a library never imports a script;
no module takes another's private (_underscore) names; each subpackage imports only the layers
its docstring names."""

import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "bert_keras"

# What each part of the package may import of the package itself (besides its own modules).
# "root" is the root's libraries (modeling, tokenization, ...), never its scripts.
ALLOWED = {
    "utils": set(),
    "root": {"utils"},
    "pretraining_data": {"utils", "root"},
    "runtime": {"utils", "root"},
    "tasks": {"utils", "runtime", "root"},
    "prediction": {"utils", "runtime", "root", "tasks"},
    "server": {"utils", "root"},
    "script": {"utils", "root", "runtime", "pretraining_data", "tasks", "prediction", "server",
               "script"},
}
# The scripts that import another script, each for a stated reason: the Beam twin is
# create_pretraining_data's job on another runner; run_squad scores itself with the official
# evaluation's functions (evaluate_squad does nothing on import); predict_beam is predict's job
# on another runner (its checks, Columns and load_predictor).
SCRIPT_IMPORTS = {("create_pretraining_data_beam", "create_pretraining_data"),
                  ("run_squad", "evaluate_squad"), ("predict_beam", "predict")}
# Private modules (C extensions, no .py) and the one module that owns each.
PRIVATE_MODULES = {"_word_table": "tokenization"}


def package_modules(root):
  """{dotted name under the package: path} of every module: the root's .py files (but
  setup.py) and those of the subpackages (directories with an __init__.py)."""
  modules = {}
  for path in sorted(root.glob("*.py")):
    if path.name != "setup.py":
      modules["" if path.stem == "__init__" else path.stem] = path
  for init in sorted(subpackage_inits(root)):
    package = ".".join(init.parent.relative_to(root).parts)
    for path in sorted(init.parent.glob("*.py")):
      modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
  return modules


def subpackage_inits(root):
  """The __init__.py of every subpackage: the root's directories that have one, and the
  packages nested in them (tasks/classifier, ...)."""
  return [init for top in root.glob("*/__init__.py") for init in top.parent.rglob("__init__.py")]


def is_script(tree):
  """A module with an `if __name__ == "__main__":` block."""
  for node in tree.body:
    if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
      return True
  return False


def absolute_module(node, name, is_package):
  """The dotted module an `ast.ImportFrom` of module `name` reads from: its own module when
  absolute; a relative one (`from . import x`, `from ..y import z`) resolved against the
  package of `name` (`name` itself when it is a package's __init__). None when the dots
  climb above the package."""
  if node.level == 0:
    return node.module
  package = [PACKAGE] + (name.split(".") if name else [])
  if not is_package:
    package = package[:-1]
  if node.level - 1 >= len(package):
    return None
  base = package[:len(package) - (node.level - 1)]
  return ".".join(base + ([node.module] if node.module else []))


def imports(tree, modules, name="", is_package=False):
  """[(imported module, [names taken from it], line)] of the package's modules imported
  anywhere in `tree` (the module `name`, a package's __init__ when `is_package`; relative
  imports resolved against it), and [(alias, module)] bound by those imports."""
  found, aliases = [], []
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom):
      module = absolute_module(node, name, is_package)
      if module is None:
        found.append((None, [], node.lineno))  # (dots above the package)
        continue
      if module != PACKAGE and not module.startswith(PACKAGE + "."):
        continue
      base = module[len(PACKAGE) + 1:]
      for alias in node.names:
        sub = f"{base}.{alias.name}" if base else alias.name
        if sub in modules or sub in PRIVATE_MODULES:  # `from bert_keras.x import module`
          found.append((sub, [], node.lineno))
          aliases.append((alias.asname or alias.name, sub))
        else:  # `from bert_keras.x import name`
          found.append((base, [alias.name], node.lineno))
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.startswith(PACKAGE + "."):
          sub = alias.name[len(PACKAGE) + 1:]
          found.append((sub, [], node.lineno))
          if alias.asname:
            aliases.append((alias.asname, sub))
  return found, aliases


def layer(name, scripts):
  if name in scripts:
    return "script"
  return name.split(".")[0] if "." in name else ("root" if name else "root")


def find_cycle(graph):
  """One cycle of `graph` ({node: set of nodes}) as a list of nodes, or None."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == "open":
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        cycle = visit(nxt)
        if cycle:
          return cycle
    state[node] = "done"
    stack.pop()
    return None

  for node in sorted(graph):
    if node not in state:
      cycle = visit(node)
      if cycle:
        return cycle
  return None


def violations(root):
  """Every breach of the import rule in the package at `root`, as readable lines."""
  modules = package_modules(root)
  trees = {name: ast.parse(path.read_text(encoding="utf-8"), str(path))
           for name, path in modules.items()}
  scripts = {name for name, tree in trees.items() if "." not in name and is_script(tree)}
  problems, graph = [], {}
  for name, tree in trees.items():
    where = os.path.relpath(modules[name], root)
    found, aliases = imports(tree, modules, name, modules[name].stem == "__init__")
    mine = layer(name, scripts)
    for target, names, line in found:
      if target is None:
        problems.append(f"{where}:{line}: a relative import above the package {PACKAGE}")
        continue
      if target in PRIVATE_MODULES:
        if PRIVATE_MODULES[target] != name:
          problems.append(f"{where}:{line}: imports {target}, private to "
                          f"{PRIVATE_MODULES[target]}")
        continue
      if target not in modules:
        problems.append(f"{where}:{line}: imports {PACKAGE}.{target}, which does not exist")
        continue
      if target != name:
        graph.setdefault(name, set()).add(target)
      theirs = layer(target, scripts)
      if theirs != mine and theirs not in ALLOWED[mine] and target != "":
        problems.append(f"{where}:{line}: {mine} module imports {theirs} module {target}")
      if mine == "script" and theirs == "script" and (name, target) not in SCRIPT_IMPORTS:
        problems.append(f"{where}:{line}: script {name} imports script {target}")
      if mine != "script" and theirs == "script":
        problems.append(f"{where}:{line}: library {name} imports script {target}")
      for taken in names:
        if taken.startswith("_"):
          problems.append(f"{where}:{line}: takes private {taken} of {target}")
    alias_names = dict(aliases)
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in alias_names and node.attr.startswith("_")
          and not node.attr.startswith("__")):
        problems.append(f"{where}:{node.lineno}: uses private {node.value.id}.{node.attr}")
  cycle = find_cycle(graph)
  if cycle:
    problems.append("import cycle: " + " -> ".join(cycle))
  return problems


def test_the_package_keeps_the_import_rule():
  assert violations(ROOT) == []


def test_each_subpackage_says_what_it_holds_and_may_import():
  for init in sorted(subpackage_inits(ROOT)):
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert doc, f"{init} has no docstring"
    assert len(doc.splitlines()) <= 3, f"{init}: a docstring of three lines at most"
    assert "May import" in doc, f"{init}: the docstring says what it may import"
    top = init.parent.relative_to(ROOT).parts[0]
    assert top in ALLOWED, f"{top} has no row in ALLOWED"


# The root's libraries: what a user imports (the original's three and the public Keras-side
# modules). Everything else at the root is a script; support code goes to a subpackage.
PUBLIC_LIBRARIES = {"modeling", "losses", "tokenization", "optimization", "checkpoints",
                    "preprocessing",
                    "serving", "task_registry", "output_families", "model_files", "retrieval",
                    "huggingface_layout", "sentence_transformers_layout",
                    "checkpoint_rules"}


def test_the_root_holds_scripts_and_the_public_libraries_only():
  libraries = {path.stem for path in ROOT.glob("*.py")
               if path.name not in ("setup.py", "__init__.py")
               and not is_script(ast.parse(path.read_text()))}
  assert libraries == PUBLIC_LIBRARIES


def _write(root, files):
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("files, expected", [
    # a cycle through a lazy import
    ({"a.py": "from bert_keras import b\n",
      "b.py": "def f():\n  from bert_keras import a\n"}, "import cycle: a -> b -> a"),
    # a library importing a script
    ({"lib.py": "from bert_keras import tool\n",
      "tool.py": "if __name__ == '__main__':\n  pass\n"}, "library lib imports script tool"),
    # a private name, taken or used
    ({"a.py": "from bert_keras.utils.x import _secret\n", "utils/__init__.py": "",
      "utils/x.py": "_secret = 1\n"}, "takes private _secret of utils.x"),
    ({"a.py": "from bert_keras.utils import x\nx._secret\n", "utils/__init__.py": "",
      "utils/x.py": "_secret = 1\n"}, "uses private x._secret"),
    # a lower layer importing a higher one
    ({"utils/__init__.py": "", "utils/x.py": "from bert_keras import modeling\n",
      "modeling.py": ""}, "utils module imports root module modeling"),
    ({"runtime/__init__.py": "", "runtime/t.py": "from bert_keras.tasks import m\n",
      "tasks/__init__.py": "", "tasks/m.py": ""}, "runtime module imports tasks module tasks.m"),
    # a script importing another script without a stated reason
    ({"run_a.py": "from bert_keras import run_b\nif __name__ == '__main__':\n  pass\n",
      "run_b.py": "if __name__ == '__main__':\n  pass\n"}, "script run_a imports script run_b"),
    # the same breaches through relative imports, resolved against the module's package
    ({"utils/__init__.py": "", "utils/x.py": "from .. import modeling\n",
      "modeling.py": ""}, "utils module imports root module modeling"),
    ({"runtime/__init__.py": "", "runtime/t.py": "def f():\n  from ..tasks.m import g\n",
      "tasks/__init__.py": "", "tasks/m.py": "def g():\n  pass\n"},
     "runtime module imports tasks module tasks.m"),
    ({"utils/__init__.py": "", "utils/x.py": "_secret = 1\n",
      "utils/y.py": "from .x import _secret\n"}, "takes private _secret of utils.x"),
    ({"utils/__init__.py": "", "utils/x.py": "from . import y\n",
      "utils/y.py": "def f():\n  from .x import g\n"}, "import cycle: utils.x -> utils.y"),
    ({"lib.py": "from . import tool\n",
      "tool.py": "if __name__ == '__main__':\n  pass\n"}, "library lib imports script tool"),
    ({"a.py": "from ... import elsewhere\n"}, "a relative import above the package"),
])
def test_the_checker_finds_planted_breaches(tmp_path, files, expected):
  _write(tmp_path, files)
  found = violations(tmp_path)
  assert any(expected in line for line in found), found


def test_the_checker_accepts_a_clean_tree(tmp_path):
  _write(tmp_path, {
      "__init__.py": "", "modeling.py": "from bert_keras.utils import x\n",
      "utils/__init__.py": "from . import x\n", "utils/x.py": "import os\nfrom . import y\n",
      "utils/y.py": "import math\n", "runtime/__init__.py": "",
      "runtime/r.py": "from .. import modeling\nfrom ..utils import y\nfrom . import s\n",
      "runtime/s.py": "",
      "run_a.py": ("from bert_keras import modeling\nfrom bert_keras.utils import x\n"
                   "if __name__ == '__main__':\n  pass\n")})
  assert violations(tmp_path) == []


# The size rule: no file longer than 1,000 lines, except the original's three long ones, which
# stay under the original's longest file (run_squad.py, 1,283 lines).
MAX_LINES = 1000
LONG_FILES = {"modeling.py": 1283, "tokenization.py": 1283, "create_pretraining_data.py": 1283}


def test_no_file_is_longer_than_the_size_rule():
  """CONTRIBUTING's size rule: no Python file of the repository (tests and benches too) is
  longer than 1,000 lines, but modeling.py, tokenization.py and create_pretraining_data.py."""
  too_long = {}
  for path in ROOT.rglob("*.py"):
    relative = path.relative_to(ROOT)
    if relative.parts[0].startswith(".") or relative.parts[0] in ("build", "dist"):
      continue
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if lines > LONG_FILES.get(str(relative), MAX_LINES):
      too_long[str(relative)] = lines
  assert not too_long, too_long
