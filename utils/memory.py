"""The host's memory, for the checks that refuse a model too large before it is built."""

import os


def physical_bytes():
  """This machine's physical memory (bytes); 1 TB where it cannot be read."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError):
    return 1 << 40


def available_bytes():
  """The memory a new allocation can get now: MemAvailable, bounded by the cgroup's limit
  (containers); physical memory where neither can be read."""
  available = []
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          available.append(int(line.split()[1]) * 1024)
  except (OSError, ValueError, IndexError):
    pass
  try:
    with open("/sys/fs/cgroup/memory.max") as f:
      limit = f.read().strip()
    if limit != "max":
      with open("/sys/fs/cgroup/memory.current") as f:
        available.append(int(limit) - int(f.read().strip()))
  except (OSError, ValueError):
    pass
  if not available:
    return physical_bytes()
  return min(available)
