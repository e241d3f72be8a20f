"""Python's random.Random (Mersenne Twister) replayed on its raw 32-bit words.

create_pretraining_data draws from one `random.Random` exactly as the original
did, but reads the generator's words in bulk and replays the draws on them
(Python int objects per draw were a third of the run time). CPython's Random
gives:
  random()       = ((w0 >> 5) * 2**26 + (w1 >> 6)) / 2**53     (two words)
  getrandbits(k) = w >> (32 - k) for 0 < k <= 32                 (one word)
  randbelow(n)   = getrandbits(n.bit_length()) until < n          (rejection)
  randint(a, b)  = a + randbelow(b - a + 1)
  shuffle(x)     = for i = len-1 .. 1: j = randbelow(i + 1); swap x[i], x[j]
and getrandbits(32 * n) returns the next n words as one little-endian int.
`self_check()` compares this replay with the real thing at first use.

randbelow's rejection sampling is replayed in one place, `randbelow_draws`, for
a run of draws whose bounds are known in advance (a shuffle's steps) or for a
single draw; the C extension's copy of it (_word_table.c, the same results) is
used when it is built, as it keeps create_pretraining_data as fast as the six
hand-inlined loops it replaces (pure Python is slower).
"""

import array
import functools
import itertools
import random

import numpy as np

from bert_keras import tokenization

TWO53 = float(1 << 53)


def randbelow_draws(top_bits, pos, steps, x=None):
  """randbelow(m) for each step of a run of draws, replayed on the top bits of pre-read words.

  The one place where randbelow's rejection sampling is replayed.
  Args:
    top_bits: the top `width` bits of every word (WordStream.top8, top16, or a list of
      full 32-bit words), indexable from `pos` on, with enough words after it (reserve).
    pos: the index of the next unused word.
    steps: [(i, shift, limit)] per draw. For randbelow(m), k = m.bit_length() <= width:
      shift = width - k and limit = m << shift; a word is taken while its top k bits
      (top_bits[p] >> shift) are not below m, i.e. while top_bits[p] >= limit. i is
      only used with x.
    x: None, or a list whose items i are not read after their step: then draw j of step
      i is the step of rng.shuffle(x) (m = i + 1) as far as it matters, x[j] = x[i], and
      no draw is returned (replay_shuffle).
  Returns:
    (list of the draws, or [] with x; the index of the next unused word).
  """
  draws = []
  for i, shift, limit in steps:
    w = top_bits[pos]
    pos += 1
    while w >= limit:
      w = top_bits[pos]
      pos += 1
    if x is None:
      draws.append(w >> shift)
    else:
      x[w >> shift] = x[i]
  return draws, pos


PYTHON_RANDBELOW_DRAWS = randbelow_draws  # the reference; tests compare the C one with it
if getattr(tokenization.native_extension(), "randbelow_draws", None) is not None:
  randbelow_draws = tokenization.native_extension().randbelow_draws  # the same, in C


def draw_step(m, width, i=0):
  """The step (i, shift, limit) of one randbelow(m) on the top `width` bits (randbelow_draws)."""
  shift = width - m.bit_length()
  return i, shift, m << shift


@functools.lru_cache(maxsize=None)
def _shuffle_step(i, width):
  return draw_step(i + 1, width, i)  # one shared tuple per (i, width) across shuffle tables


def shuffle_steps(n, keep=None):
  """The draws of rng.shuffle(x) for len(x) == n, for replay_shuffle.

  Step i (n - 1 down to 1) is j = randbelow(i + 1), then x[i] and x[j] swap; randbelow
  takes (i + 1).bit_length() bits: i + 1 >= 256 from the top 16 bits of a word, smaller
  ones from the top 8. When only x[:keep] is read afterwards, a step i >= keep only needs
  x[j] = x[i] (x[i] is never read again).
  Returns (assign16, swap16, assign8, swap8): the steps (i, shift, limit) of each kind, in
  draw order (i >= keep: assign; 16 or 8 bits).
  """
  keep = n if keep is None else keep
  steps16 = [_shuffle_step(i, 16) for i in range(n - 1, 254, -1)]
  steps8 = [_shuffle_step(i, 8) for i in range(min(n, 255) - 1, 0, -1)]
  return (tuple(s for s in steps16 if s[0] >= keep), tuple(s for s in steps16 if s[0] < keep),
          tuple(s for s in steps8 if s[0] >= keep), tuple(s for s in steps8 if s[0] < keep))


def replay_shuffle(x, top16, top8, pos, steps):
  """rng.shuffle(x) replayed from word `pos`; returns the next pos.

  steps: shuffle_steps(len(x), keep); x[:keep] is then as rng.shuffle leaves it.
  """
  assign16, swap16, assign8, swap8 = steps
  for top_bits, assign, swap in ((top16, assign16, swap16), (top8, assign8, swap8)):
    if assign:
      _, pos = randbelow_draws(top_bits, pos, assign, x)
    if swap:
      pos = _swaps(x, top_bits, pos, swap)
  return pos


def _swaps(x, top_bits, pos, steps):
  """Steps (i, shift, limit) of rng.shuffle(x): x[i] and x[j = randbelow(i + 1)] swap."""
  draws, pos = randbelow_draws(top_bits, pos, steps)
  for (i, _, _), j in zip(steps, draws):
    x[i], x[j] = x[j], x[i]
  return pos


class WordStream(object):
  """The 32-bit words of a generator, read ahead, with random.Random's draws replayed on them.

  Words are read ahead in chunks (subclasses say from where: next_words) and kept
  three ways, none of them as Python int objects per word:
    top8:  bytes, the top 8 bits of each word (w >> 24). randbelow(m) for
           m <= 255 uses only these bits (w >> (32 - k) == top8 >> (8 - k)),
           and so do random() < 0.5 (top bit) and, except when top8 == 204,
           random() < 0.8. Indexing bytes gives cached small ints: fast.
    top16: array('H'), the top 16 bits, for randbelow(m), m < 65536.
    full:  numpy uint32 [num_words], the words, for everything else.
  Hot loops read these inline at `pos`; call `reserve(n)` first to have at
  least n words after `pos`, and reload the three after any call that may
  refill.
  """

  CHUNK = 1 << 18

  def __init__(self, chunk=None):
    self.chunk = chunk or self.CHUNK
    self.full = np.zeros(0, dtype=np.uint32)
    self.top8 = b""
    self.top16 = array.array("H")
    self.pos = 0

  def next_words(self, count):
    """The generator's next `count` (or more) words: numpy uint32 [>= count]."""
    raise NotImplementedError

  def reserve(self, n):
    """Makes sure that at least n words follow `pos` (may rebuild full, top8 and top16)."""
    if len(self.full) - self.pos < n:
      words = self.next_words(max(n, self.chunk))
      full = np.concatenate([self.full[self.pos:], words]).astype(np.uint32)
      self.full = full
      self.top8 = (full >> 24).astype(np.uint8).tobytes()
      self.top16 = array.array("H", (full >> 16).astype("<u2").tobytes())
      self.pos = 0

  def random(self):
    self.reserve(2)
    p = self.pos
    self.pos = p + 2
    return ((int(self.full[p]) >> 5) * 67108864.0 +
            (int(self.full[p + 1]) >> 6)) * (1.0 / TWO53)

  def randbelow(self, n):
    """random.Random's _randbelow(n), n >= 1."""
    k = n.bit_length()
    if k <= 16 and len(self.top8) - self.pos >= 64:  # the common case, inline
      top_bits, shift = (self.top8, 8 - k) if k <= 8 else (self.top16, 16 - k)
      try:
        (r,), self.pos = randbelow_draws(top_bits, self.pos, ((0, shift, n << shift),))
        return r
      except IndexError:  # ran out of words (probability < 2**-64): as below
        pass
    if k > 32:
      return self._randbelow_multiword(n)
    need = 64
    while True:
      self.reserve(need)
      if k <= 16:
        top_bits, start, shift = (self.top8, self.pos, 8 - k) if k <= 8 else (
            self.top16, self.pos, 16 - k)
      else:
        top_bits, start, shift = self.full[self.pos:self.pos + need].tolist(), 0, 32 - k
      try:
        (r,), end = randbelow_draws(top_bits, start, ((0, shift, n << shift),))
      except IndexError:  # ran out of words: draw again from the same word with more ahead
        need *= 64
        continue
      self.pos += end - start
      return r

  def _randbelow_multiword(self, n):
    k = n.bit_length()
    words = (k + 31) // 32
    while True:
      self.reserve(words)
      chunk = [int(w) for w in self.full[self.pos:self.pos + words]]
      self.pos += words
      if k % 32:
        chunk[-1] >>= 32 - k % 32
      r = 0
      for w in reversed(chunk):
        r = (r << 32) | w
      if r < n:
        return r

  def randint(self, a, b):
    if b < a:
      raise ValueError("empty range for randint(%d, %d)" % (a, b))
    return a + self.randbelow(b - a + 1)

  def shuffle(self, x):
    for i in range(len(x) - 1, 0, -1):
      j = self.randbelow(i + 1)
      x[i], x[j] = x[j], x[i]

  def permutation(self, n, block=1 << 16):
    """The order `random.shuffle` gives to list(range(n)), as an array('q') [n]."""
    order = array.array("q", range(n))
    i = n - 1
    while i > 0:
      k = (i + 1).bit_length()
      if k > 32:
        j = self.randbelow(i + 1)
        order[i], order[j] = order[j], order[i]
        i -= 1
        continue
      # Steps down to the next power of two draw k bits: `block` of them at a time.
      width = 8 if k <= 8 else 16 if k <= 16 else 32
      shift = width - k
      low = max(1, i - block + 1, (1 << (k - 1)) - 1)
      need = 4 * (i - low + 1) + 4096
      self.reserve(need)
      if width == 32:
        top_bits, start = self.full[self.pos:self.pos + need].tolist(), 0
      else:
        top_bits, start = (self.top8 if width == 8 else self.top16), self.pos
      steps = list(zip(range(i, low - 1, -1), itertools.repeat(shift),
                       range((i + 1) << shift, low << shift, -1 << shift)))
      self.pos += _swaps(order, top_bits, start, steps) - start
      i = low - 1
    return order


class RandomWords(WordStream):
  """The word stream of a `random.Random`, with its draws replayed exactly."""

  def __init__(self, rng):
    super().__init__()
    self.rng = rng
    self._start_state = rng.getstate()
    self._taken = 0

  def next_words(self, count):
    words = np.frombuffer(
        self.rng.getrandbits(32 * count).to_bytes(4 * count, "little"), dtype="<u4")
    self._taken += count
    return words

  def sync(self):
    """Leaves `rng` exactly where the draws replayed so far would have left it.

    Words are read ahead in chunks; this rewinds the generator to its initial
    state and advances it by the number of words actually used.
    """
    used = self._taken - (len(self.full) - self.pos)
    self.rng.setstate(self._start_state)
    while used > 0:
      step = min(used, 1 << 20)
      self.rng.getrandbits(32 * step)
      used -= step
    self.__init__(self.rng)


_self_checked = False


def self_check():
  """Verifies the replay against this Python's random.Random (once per process)."""
  global _self_checked
  if _self_checked:
    return
  real = random.Random(20181031)
  ours = RandomWords(random.Random(20181031))
  for n in (1, 2, 3, 5, 7, 64, 100, 127, 128, 129, 30522, 2**31 - 1, 2**32, 2**40 + 7):
    for _ in range(3):
      if real.random() != ours.random() or real.randint(0, n - 1) != ours.randint(0, n - 1):
        raise RuntimeError("this Python's random.Random differs from the replay in "
                           "random_replay.py; please report it")
  x, y = list(range(300)), list(range(300))
  real.shuffle(x)
  ours.shuffle(y)
  z = list(range(1000))
  real.shuffle(z)
  if x != y or list(ours.permutation(1000)) != z:
    raise RuntimeError("this Python's random.shuffle differs from the replay in "
                       "random_replay.py; please report it")
  _self_checked = True
