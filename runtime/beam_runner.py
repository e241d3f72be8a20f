"""What the Beam scripts (create_pretraining_data_beam.py, predict_beam.py) share to start a
pipeline: apache_beam imported quietly (None without the [beam] extra), PipelineOptions of
the --runner / --direct_* flags and the other arguments, the DirectRunner's batch engine,
the arguments that are no pipeline option, the absl parser that leaves the rest to Beam,
and a finished pipeline's metrics.

apache_beam is imported only by import_beam and inside the functions: the module imports
without it.
"""


DIRECT_RUNNERS = ("DirectRunner", "direct", "FnApiRunner")
RUNNING_MODES = ("in_memory", "multi_threading", "multi_processing")


def import_beam():
  """apache_beam, or None (the optional extra is not installed). Its import logs a warning
  about the BigQuery client libraries (unused here) to the root logger: dropped."""
  import logging as std_logging
  quiet = std_logging.Filter()
  quiet.filter = lambda record: "apitools not found" not in record.getMessage()
  std_logging.getLogger().addFilter(quiet)
  try:
    import apache_beam
    return apache_beam
  except ImportError:
    return None
  finally:
    std_logging.getLogger().removeFilter(quiet)


def pipeline_options(runner="DirectRunner", direct_num_workers=1,
                     direct_running_mode="in_memory", beam_args=()):
  """Beam PipelineOptions of our --runner/--direct_* flags and the other arguments."""
  from apache_beam.options.pipeline_options import PipelineOptions
  args = ["--runner=%s" % runner, "--direct_num_workers=%d" % direct_num_workers,
          "--direct_running_mode=%s" % direct_running_mode]
  if runner in DIRECT_RUNNERS and not any(
      a.startswith("--default_sdk_harness_log_level") for a in beam_args):
    args.append("--default_sdk_harness_log_level=WARNING")  # worker processes: no INFO chatter
  return PipelineOptions(args + list(beam_args))


def runner_for(options):
  """The DirectRunner's batch engine (FnApiRunner), for --runner=DirectRunner; else None (Beam
  makes the runner --runner names). Beam 2.77's DirectRunner would first try its Prism runner,
  a binary it downloads at run time; --runner=PrismRunner still selects that one."""
  from apache_beam.options.pipeline_options import StandardOptions
  if options.view_as(StandardOptions).runner not in DIRECT_RUNNERS:
    return None
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.portability.portable_runner import JobServiceHandle
  encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
  return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
      beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def unknown_beam_args(beam_args):
  """The arguments that are no Beam pipeline option (PipelineOptions would discard them)."""
  from apache_beam.options.pipeline_options import PipelineOptions
  bad = [a for a in beam_args if not a.startswith("-")]
  options = PipelineOptions(list(beam_args))
  known = set(options.get_all_options())
  everything = options.get_all_options(retain_unknown_options=True)
  unknown = set(everything) - known
  for arg in beam_args:
    name = arg.lstrip("-").split("=", 1)[0]
    if arg.startswith("-") and name in unknown:
      bad.append(arg)
  return bad


def parse_flags(argv):
  """absl's flags (utils/errors.parse_flags: a wrong one is one `error:` line); the arguments
  it does not know are returned for Beam."""
  from bert_keras.utils import errors
  return errors.parse_flags(argv, known_only=True)


def metrics(result, namespace):
  """({counter name: value}, set of the "errors" string set's messages) of a finished
  pipeline's metrics in `namespace`."""
  from apache_beam.metrics.metric import MetricsFilter
  query = result.metrics().query(MetricsFilter().with_namespace(namespace))
  counters = {}
  for counter in query["counters"]:
    value = counter.committed if counter.committed is not None else counter.attempted
    counters[counter.key.metric.name] = counters.get(counter.key.metric.name, 0) + value
  errors = set()
  for found in query.get("string_sets", []):
    value = found.committed if found.committed is not None else found.attempted
    errors.update(value or ())
  return counters, errors
