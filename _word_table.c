/* _word_table: the hot loop of tokenization.py's batch methods, in C.
 *
 * A WordTable maps a word (a run of non-whitespace characters of a cleaned text) to the
 * tuple of its tokens, as tokenization._PythonWordCache does with a dict, but without making
 * a str object per word: words are hashed and compared straight from the text's buffer, and
 * only a word seen for the first time is tokenized: by a Python function
 * `compute(word) -> tuple` (tokenization.py's exact per-word code), or, after
 * set_wordpiece(), here in C when the word is pure ASCII (the original's ASCII punctuation
 * split and greedy longest-match-first WordPiece, as FullTokenizer._word_pieces does):
 *
 *   table.map_lines(cleaned, compute)
 *       == [list(chain(*(cache(w) for w in line.split()))) for line in cleaned.split("\n")]
 *   table.map_ids(cleaned, compute) -> (ids: bytearray of int32, row_lengths: of int64)
 *       the same with tuples of ints, flattened: the tokens' ids and the count per line.
 *
 * Whitespace is Py_UNICODE_ISSPACE, the definition str.split() uses. The table starts
 * afresh when it holds `limit` words, so memory stays bounded on any corpus. Reading order:
 * the word table, the ASCII WordPiece, lookup (one word), walk (one text), the two
 * map_* methods, set_wordpiece, the type; then randbelow_draws, random_replay.py's
 * rejection sampling (create_pretraining_data's hot loop), which has nothing to do with
 * words but lives here to keep one optional extension.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

/* Py_UNICODE_ISSPACE of the first 256 code points (filled in by the module's init). */
static unsigned char is_space_latin1[256];

typedef struct {
  PyObject *value; /* the tuple of tokens; NULL: an empty slot */
  char *key;       /* a copy of the word's code units */
  Py_ssize_t size; /* bytes in key */
  Py_uhash_t hash;
  int kind;        /* PyUnicode kind of the text the key was read from */
} Entry;

/* A vocab entry for the WordPiece of ASCII words: key = the token's bytes (or, in the
 * suffix set, the bytes after its "##"). */
typedef struct {
  PyObject *token; /* the vocab's str; NULL: an empty slot */
  long id;
  char *key;
  Py_ssize_t size;
  Py_uhash_t hash;
} VocabEntry;

typedef struct {
  VocabEntry *entries;
  Py_ssize_t capacity, max_size;
} VocabSet;

typedef struct {
  PyObject_HEAD
  Entry *entries;
  Py_ssize_t capacity; /* a power of two */
  Py_ssize_t used;
  Py_ssize_t limit;
  /* set_wordpiece: pure-ASCII words are tokenized here instead of by compute() */
  int wordpiece, lower, ids;
  VocabSet whole, suffix;
  PyObject *unk;
  long unk_id;
  unsigned char latin1[128]; /* U+0080..U+00FF -> the ASCII letter it becomes, or 0 */
  Py_ssize_t max_chars;
} WordTable;

static Py_uhash_t hash_bytes(const char *p, Py_ssize_t n, int kind) {
  /* FNV-1a, 64 bit */
  Py_uhash_t h = 1469598103934665603ULL ^ (Py_uhash_t)kind;
  for (Py_ssize_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 1099511628211ULL;
  }
  return h ^ (h >> 29);
}

static void clear_entries(WordTable *t) {
  for (Py_ssize_t i = 0; i < t->capacity; i++) {
    Entry *e = &t->entries[i];
    if (e->value) {
      Py_CLEAR(e->value);
      PyMem_Free(e->key);
      e->key = NULL;
    }
  }
  t->used = 0;
}

static int allocate(WordTable *t, Py_ssize_t capacity) {
  Entry *entries = PyMem_Calloc((size_t)capacity, sizeof(Entry));
  if (!entries) {
    PyErr_NoMemory();
    return -1;
  }
  t->entries = entries;
  t->capacity = capacity;
  t->used = 0;
  return 0;
}

static Entry *find_slot(Entry *entries, Py_ssize_t capacity, const char *key, Py_ssize_t size,
                        Py_uhash_t hash, int kind) {
  size_t mask = (size_t)capacity - 1, i = (size_t)hash & mask;
  for (;;) {
    Entry *e = &entries[i];
    if (!e->value ||
        (e->hash == hash && e->size == size && e->kind == kind && !memcmp(e->key, key, size)))
      return e;
    i = (i + 1) & mask;
  }
}

static int grow(WordTable *t) {
  Entry *old = t->entries;
  Py_ssize_t old_capacity = t->capacity, used = t->used;
  if (allocate(t, old_capacity * 2) < 0) return -1;
  for (Py_ssize_t i = 0; i < old_capacity; i++) {
    if (old[i].value) *find_slot(t->entries, t->capacity, old[i].key, old[i].size,
                                 old[i].hash, old[i].kind) = old[i];
  }
  t->used = used;
  PyMem_Free(old);
  return 0;
}


/* ---- WordPiece of pure-ASCII words (set_wordpiece), the original's algorithm ---------- */

static void free_vocab(VocabSet *v) {
  for (Py_ssize_t i = 0; i < v->capacity; i++) {
    Py_XDECREF(v->entries[i].token);
    PyMem_Free(v->entries[i].key);
  }
  PyMem_Free(v->entries);
  v->entries = NULL;
  v->capacity = v->max_size = 0;
}

static VocabEntry *vocab_slot(const VocabSet *v, const char *key, Py_ssize_t size,
                              Py_uhash_t hash) {
  size_t mask = (size_t)v->capacity - 1, i = (size_t)hash & mask;
  for (;;) {
    VocabEntry *e = &v->entries[i];
    if (!e->token || (e->hash == hash && e->size == size && !memcmp(e->key, key, size)))
      return e;
    i = (i + 1) & mask;
  }
}

static int vocab_add(VocabSet *v, const char *key, Py_ssize_t size, PyObject *token, long id) {
  Py_uhash_t hash = hash_bytes(key, size, 1);
  VocabEntry *e = vocab_slot(v, key, size, hash);
  if (e->token) return 0; /* (a str key of a dict is there once) */
  e->key = PyMem_Malloc(size ? (size_t)size : 1);
  if (!e->key) {
    PyErr_NoMemory();
    return -1;
  }
  memcpy(e->key, key, size);
  Py_INCREF(token);
  e->token = token;
  e->id = id;
  e->size = size;
  e->hash = hash;
  if (size > v->max_size) v->max_size = size;
  return 0;
}

static int is_ascii_punctuation(unsigned char c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126);
}

/* Longest-match-first WordPiece of the basic token buf[0:n], appended to pieces; a token
 * longer than max_chars, or with a position no vocab entry matches, is one [UNK]. */
static void wordpiece_token(const WordTable *t, const char *buf, Py_ssize_t n,
                            VocabEntry **pieces, Py_ssize_t *count, VocabEntry *unk) {
  Py_ssize_t first = *count, start = 0;
  if (n > t->max_chars) {
    pieces[(*count)++] = unk;
    return;
  }
  while (start < n) {
    const VocabSet *v = start == 0 ? &t->whole : &t->suffix;
    Py_ssize_t end = n - start < v->max_size ? n : start + v->max_size;
    VocabEntry *match = NULL;
    for (; end > start; end--) {
      VocabEntry *e = vocab_slot(v, buf + start, end - start,
                                 hash_bytes(buf + start, end - start, 1));
      if (e->token) {
        match = e;
        break;
      }
    }
    if (!match) {
      *count = first;
      pieces[(*count)++] = unk;
      return;
    }
    pieces[(*count)++] = match;
    start = end;
  }
}

/* The tuple of tokens (or ids) of a pure-ASCII word: lower-cased (if t->lower), split into
 * runs of punctuation characters (one token each) and of other characters, each through
 * WordPiece. Returns a new tuple, or NULL with an exception set. */
static PyObject *wordpiece_word(const WordTable *t, const unsigned char *word, Py_ssize_t n) {
  char small[256], *buf = n <= 256 ? small : PyMem_Malloc((size_t)n);
  /* at most one piece per character (n >= 1) */
  VocabEntry *small_pieces[256], **pieces =
      n <= 256 ? small_pieces : PyMem_Malloc((size_t)n * sizeof(VocabEntry *));
  VocabEntry unk = {t->unk, t->unk_id, NULL, 0, 0};
  PyObject *result = NULL;
  Py_ssize_t count = 0;
  if (!buf || !pieces) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    buf[i] = (char)(t->lower && word[i] >= 'A' && word[i] <= 'Z' ? word[i] + 32 : word[i]);
  for (Py_ssize_t i = 0; i < n;) {
    Py_ssize_t j = i + 1;
    if (!is_ascii_punctuation((unsigned char)buf[i]))
      while (j < n && !is_ascii_punctuation((unsigned char)buf[j])) j++;
    wordpiece_token(t, buf + i, j - i, pieces, &count, &unk);
    i = j;
  }
  result = PyTuple_New(count);
  for (Py_ssize_t i = 0; result && i < count; i++) {
    PyObject *item = t->ids ? PyLong_FromLong(pieces[i]->id) : pieces[i]->token;
    if (!item) {
      Py_CLEAR(result);
      break;
    }
    if (!t->ids) Py_INCREF(item);
    PyTuple_SET_ITEM(result, i, item);
  }
done:
  if (buf != small) PyMem_Free(buf);
  if (pieces != small_pieces) PyMem_Free(pieces);
  return result;
}

/* The word text[start:end] as ASCII bytes, if every character is ASCII or (after
 * set_wordpiece with a latin1 table) a Latin-1 letter that lower-casing and accent stripping
 * turn into one ASCII letter ("É" -> "e"): for a text of kind 1 whose word is pure ASCII, the
 * text's own buffer, else a PyMem_Malloc'd copy. Else NULL (with an exception set only when
 * out of memory). Words of ASCII characters occur in texts of every kind: a "“" or an "é"
 * anywhere in a batch makes the whole joined text kind 2 or 1. */
static unsigned char *ascii_word(const WordTable *t, int kind, const char *data,
                                 Py_ssize_t start, Py_ssize_t end) {
  int copy_needed = kind != 1;
  for (Py_ssize_t i = start; i < end; i++) {
    Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c >= 128) {
      if (c >= 256 || !t->latin1[c - 128]) return NULL;
      copy_needed = 1;
    }
  }
  if (!copy_needed) return (unsigned char *)data + start;
  unsigned char *copy = PyMem_Malloc((size_t)(end - start));
  if (!copy) {
    PyErr_NoMemory();
    return NULL;
  }
  for (Py_ssize_t i = start; i < end; i++) {
    Py_UCS4 c = PyUnicode_READ(kind, data, i);
    copy[i - start] = (unsigned char)(c < 128 ? c : t->latin1[c - 128]);
  }
  return copy;
}

/* The tuple of the word text[start:end] (borrowed), computed and stored on first sight. */
static PyObject *lookup(WordTable *t, PyObject *text, int kind, const char *data,
                        Py_ssize_t start, Py_ssize_t end, PyObject *compute) {
  const char *key = data + start * kind;
  Py_ssize_t size = (end - start) * kind;
  Py_uhash_t hash = hash_bytes(key, size, kind);
  Entry *e = find_slot(t->entries, t->capacity, key, size, hash, kind);
  if (e->value) return e->value;

  PyObject *value;
  unsigned char *ascii = t->wordpiece ? ascii_word(t, kind, data, start, end) : NULL;
  if (ascii) {
    value = wordpiece_word(t, ascii, end - start);
    if (ascii != (const unsigned char *)key) PyMem_Free(ascii);
  } else if (PyErr_Occurred()) {
    return NULL;
  } else {
    PyObject *word = PyUnicode_Substring(text, start, end);
    if (!word) return NULL;
    value = PyObject_CallOneArg(compute, word);
    Py_DECREF(word);
  }
  if (!value) return NULL;
  if (!PyTuple_Check(value)) {
    PyErr_Format(PyExc_TypeError, "compute() must return a tuple, not %.100s",
                 Py_TYPE(value)->tp_name);
    Py_DECREF(value);
    return NULL;
  }
  if (t->used >= t->limit) clear_entries(t); /* start afresh: memory stays bounded */
  if ((t->used + 1) * 2 > t->capacity && grow(t) < 0) {
    Py_DECREF(value);
    return NULL;
  }
  e = find_slot(t->entries, t->capacity, key, size, hash, kind);
  if (e->value) { /* compute() stored it already (it used this table itself) */
    Py_DECREF(value);
    return e->value;
  }
  char *copy = PyMem_Malloc(size ? (size_t)size : 1);
  if (!copy) {
    Py_DECREF(value);
    PyErr_NoMemory();
    return NULL;
  }
  memcpy(copy, key, size);
  e->value = value; /* the table keeps this reference */
  e->key = copy;
  e->size = size;
  e->hash = hash;
  e->kind = kind;
  t->used++;
  return value;
}

/* Calls on_word(state, tuple) for every word and on_line(state) after every line of
 * `text`: lines end at "\n" (and at the end of the text); words are runs of characters
 * that are not whitespace. Returns 0, or -1 with an exception set. */
typedef int (*word_fn)(void *state, PyObject *tokens);
typedef int (*line_fn)(void *state);

static int walk(WordTable *t, PyObject *text, PyObject *compute, word_fn on_word,
                line_fn on_line, void *state) {
  if (!PyUnicode_Check(text)) {
    PyErr_SetString(PyExc_TypeError, "text must be a str");
    return -1;
  }
  if (!PyCallable_Check(compute)) {
    PyErr_SetString(PyExc_TypeError, "compute must be callable");
    return -1;
  }
  int kind = PyUnicode_KIND(text);
  const char *data = PyUnicode_DATA(text);
  Py_ssize_t n = PyUnicode_GET_LENGTH(text), i = 0;
  const unsigned char *bytes = (const unsigned char *)data; /* kind 1: a byte a character */
  while (i < n) {
    Py_UCS4 c = kind == 1 ? bytes[i] : PyUnicode_READ(kind, data, i);
    if (c == '\n') {
      if (on_line(state) < 0) return -1;
      i++;
    } else if (c < 256 ? is_space_latin1[c] : Py_UNICODE_ISSPACE(c)) {
      i++;
    } else {
      Py_ssize_t start = i++;
      if (kind == 1) {
        while (i < n && !is_space_latin1[bytes[i]]) i++;
      } else {
        while (i < n && !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) i++;
      }
      /* ("\n" is whitespace too: a word never holds one) */
      PyObject *tokens = lookup(t, text, kind, data, start, i, compute);
      if (!tokens || on_word(state, tokens) < 0) return -1;
    }
  }
  return on_line(state);
}

/* map_lines: a list of lists of tokens. The tokens of the current line are gathered with
 * a new reference each (a later word may make the table start afresh), then moved into a
 * list of the right size. */
typedef struct {
  PyObject *lines;
  PyObject **items;
  Py_ssize_t n, cap;
} LinesState;

static int lines_word(void *s, PyObject *tokens) {
  LinesState *st = s;
  Py_ssize_t k = PyTuple_GET_SIZE(tokens);
  if (st->n + k > st->cap) {
    Py_ssize_t cap = (st->cap + k) * 2;
    PyObject **items = PyMem_Realloc(st->items, (size_t)cap * sizeof(PyObject *));
    if (!items) {
      PyErr_NoMemory();
      return -1;
    }
    st->items = items;
    st->cap = cap;
  }
  for (Py_ssize_t j = 0; j < k; j++) {
    PyObject *token = PyTuple_GET_ITEM(tokens, j);
    Py_INCREF(token);
    st->items[st->n++] = token;
  }
  return 0;
}

static int lines_line(void *s) {
  LinesState *st = s;
  PyObject *line = PyList_New(st->n);
  if (!line) return -1;
  for (Py_ssize_t j = 0; j < st->n; j++) PyList_SET_ITEM(line, j, st->items[j]); /* moved */
  st->n = 0;
  int err = PyList_Append(st->lines, line);
  Py_DECREF(line);
  return err;
}

static PyObject *map_lines(WordTable *t, PyObject *args) {
  PyObject *text, *compute;
  if (!PyArg_ParseTuple(args, "OO:map_lines", &text, &compute)) return NULL;
  LinesState st = {PyList_New(0), NULL, 0, 0};
  if (!st.lines) return NULL;
  if (walk(t, text, compute, lines_word, lines_line, &st) < 0) Py_CLEAR(st.lines);
  for (Py_ssize_t j = 0; j < st.n; j++) Py_DECREF(st.items[j]); /* after an error */
  PyMem_Free(st.items);
  return st.lines;
}

/* map_ids: flat int32 ids and int64 token counts per line */
typedef struct {
  int32_t *ids;
  Py_ssize_t n_ids, cap_ids;
  int64_t *lengths;
  Py_ssize_t n_lines, cap_lines;
  int64_t line_start;
} IdsState;

static int ids_word(void *s, PyObject *tokens) {
  IdsState *st = s;
  Py_ssize_t k = PyTuple_GET_SIZE(tokens);
  if (st->n_ids + k > st->cap_ids) {
    Py_ssize_t cap = (st->cap_ids + k) * 2;
    int32_t *ids = PyMem_Realloc(st->ids, (size_t)cap * sizeof(int32_t));
    if (!ids) {
      PyErr_NoMemory();
      return -1;
    }
    st->ids = ids;
    st->cap_ids = cap;
  }
  for (Py_ssize_t j = 0; j < k; j++) {
    long id = PyLong_AsLong(PyTuple_GET_ITEM(tokens, j));
    if (id == -1 && PyErr_Occurred()) return -1;
    if (id < INT32_MIN || id > INT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "token id out of int32 range");
      return -1;
    }
    st->ids[st->n_ids++] = (int32_t)id;
  }
  return 0;
}

static int ids_line(void *s) {
  IdsState *st = s;
  if (st->n_lines == st->cap_lines) {
    Py_ssize_t cap = st->cap_lines * 2 + 64;
    int64_t *lengths = PyMem_Realloc(st->lengths, (size_t)cap * sizeof(int64_t));
    if (!lengths) {
      PyErr_NoMemory();
      return -1;
    }
    st->lengths = lengths;
    st->cap_lines = cap;
  }
  st->lengths[st->n_lines++] = st->n_ids - st->line_start;
  st->line_start = st->n_ids;
  return 0;
}

static PyObject *map_ids(WordTable *t, PyObject *args) {
  PyObject *text, *compute, *result = NULL;
  if (!PyArg_ParseTuple(args, "OO:map_ids", &text, &compute)) return NULL;
  IdsState st = {0};
  if (walk(t, text, compute, ids_word, ids_line, &st) == 0) {
    /* bytearrays: numpy.frombuffer makes writable arrays of them */
    PyObject *ids = PyByteArray_FromStringAndSize((const char *)st.ids,
                                                  st.n_ids * (Py_ssize_t)sizeof(int32_t));
    PyObject *lengths = PyByteArray_FromStringAndSize(
        (const char *)st.lengths, st.n_lines * (Py_ssize_t)sizeof(int64_t));
    if (ids && lengths) result = PyTuple_Pack(2, ids, lengths);
    Py_XDECREF(ids);
    Py_XDECREF(lengths);
  }
  PyMem_Free(st.ids);
  PyMem_Free(st.lengths);
  return result;
}

static int vocab_alloc(VocabSet *v, Py_ssize_t entries) {
  Py_ssize_t capacity = 64;
  while (capacity < entries * 2) capacity *= 2;
  v->entries = PyMem_Calloc((size_t)capacity, sizeof(VocabEntry));
  if (!v->entries) {
    PyErr_NoMemory();
    return -1;
  }
  v->capacity = capacity;
  v->max_size = 0;
  return 0;
}

static PyObject *set_wordpiece(WordTable *t, PyObject *args, PyObject *kwds) {
  static char *names[] = {"vocab", "unk_token", "max_input_chars_per_word", "lower", "ids",
                          "latin1", NULL};
  PyObject *vocab, *unk;
  Py_ssize_t max_chars, latin1_size = 0;
  int lower, ids;
  const char *latin1 = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!Unpp|y#:set_wordpiece", names, &PyDict_Type,
                                   &vocab, &unk, &max_chars, &lower, &ids, &latin1,
                                   &latin1_size))
    return NULL;
  if (latin1_size == 0) latin1 = NULL; /* b"": no Latin-1 letters */
  if (latin1 && latin1_size != 128) {
    PyErr_SetString(PyExc_ValueError, "latin1 must be 128 bytes (U+0080..U+00FF)");
    return NULL;
  }
  for (int i = 0; i < 128; i++) {
    unsigned char c = latin1 ? (unsigned char)latin1[i] : 0;
    if (c >= 128) {
      PyErr_SetString(PyExc_ValueError, "latin1 maps to ASCII characters (or 0) only");
      return NULL;
    }
    t->latin1[i] = c;
  }
  /* (Words already in the table stay: compute() gave them the same tokens. Two threads may
   * both call this on first use; the second just rebuilds the same sets.) */
  free_vocab(&t->whole);
  free_vocab(&t->suffix);
  Py_CLEAR(t->unk);
  t->wordpiece = 0;
  if (vocab_alloc(&t->whole, PyDict_GET_SIZE(vocab)) < 0 ||
      vocab_alloc(&t->suffix, PyDict_GET_SIZE(vocab)) < 0)
    return NULL;
  PyObject *token, *id_object;
  Py_ssize_t pos = 0;
  while (PyDict_Next(vocab, &pos, &token, &id_object)) {
    if (!PyUnicode_Check(token) || !PyUnicode_IS_ASCII(token)) continue; /* never matched */
    long id = PyLong_AsLong(id_object);
    if (id == -1 && PyErr_Occurred()) return NULL;
    const char *key = (const char *)PyUnicode_DATA(token);
    Py_ssize_t size = PyUnicode_GET_LENGTH(token);
    if (vocab_add(&t->whole, key, size, token, id) < 0) return NULL;
    if (size >= 2 && key[0] == '#' && key[1] == '#' &&
        vocab_add(&t->suffix, key + 2, size - 2, token, id) < 0)
      return NULL;
  }
  PyObject *unk_id = PyDict_GetItemWithError(vocab, unk);
  if (!unk_id && PyErr_Occurred()) return NULL;
  t->unk_id = unk_id ? PyLong_AsLong(unk_id) : -1;
  if (t->unk_id == -1 && PyErr_Occurred()) return NULL;
  Py_INCREF(unk);
  t->unk = unk;
  t->max_chars = max_chars;
  t->lower = lower;
  t->ids = ids;
  /* ids of [UNK] unknown: compute() handles every word (and raises as it should) */
  t->wordpiece = !(ids && !unk_id);
  return PyBool_FromLong(t->wordpiece);
}

static PyObject *table_clear(WordTable *t, PyObject *Py_UNUSED(ignored)) {
  clear_entries(t);
  Py_RETURN_NONE;
}

static Py_ssize_t table_len(WordTable *t) { return t->used; }

static int table_init(WordTable *t, PyObject *args, PyObject *kwds) {
  static char *names[] = {"limit", NULL};
  Py_ssize_t limit = 1 << 20;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:WordTable", names, &limit)) return -1;
  if (t->entries) { /* __init__ called again: start empty, without WordPiece settings */
    clear_entries(t);
    PyMem_Free(t->entries);
    t->entries = NULL;
  }
  free_vocab(&t->whole);
  free_vocab(&t->suffix);
  Py_CLEAR(t->unk);
  t->wordpiece = 0;
  t->limit = limit < 1 ? 1 : limit;
  return allocate(t, 1024);
}

static void table_dealloc(WordTable *t) {
  if (t->entries) {
    clear_entries(t);
    PyMem_Free(t->entries);
  }
  free_vocab(&t->whole);
  free_vocab(&t->suffix);
  Py_XDECREF(t->unk);
  Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMethodDef table_methods[] = {
    {"map_lines", (PyCFunction)map_lines, METH_VARARGS,
     "map_lines(text, compute) -> list of lists: the tokens of every word of every line."},
    {"map_ids", (PyCFunction)map_ids, METH_VARARGS,
     "map_ids(text, compute) -> (int32 ids, int64 tokens per line), as bytearrays."},
    {"set_wordpiece", (PyCFunction)(void (*)(void))set_wordpiece, METH_VARARGS | METH_KEYWORDS,
     "set_wordpiece(vocab, unk_token, max_input_chars_per_word, lower, ids, latin1=b'') ->\n"
     "bool: from now on pure-ASCII words (and words whose other characters latin1, 128\n"
     "bytes for U+0080..U+00FF, maps to an ASCII letter; 0 = no) get their tokens (ids if\n"
     "`ids`) from the original's basic tokenization and WordPiece, done here, instead of\n"
     "from compute(). False when ids are asked for and unk_token is not in the vocab\n"
     "(compute() then handles every word)."},
    {"clear", (PyCFunction)table_clear, METH_NOARGS, "Forgets every word."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef table_members[] = {
    {"limit", T_PYSSIZET, offsetof(WordTable, limit), 0,
     "The table starts afresh when it holds this many words."},
    {NULL, 0, 0, 0, NULL}};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

static PyTypeObject WordTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_word_table.WordTable",
    .tp_basicsize = sizeof(WordTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "WordTable(limit=1048576): word -> tuple of tokens, read straight from text.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)table_init,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_members = table_members,
    .tp_as_sequence = &table_as_sequence,
};

/* randbelow_draws(top_bits, pos, steps, x=None): random_replay.randbelow_draws, in C (the
 * same arguments, results and errors; see its docstring). top_bits: bytes, array('H') or
 * a list of ints; steps: a tuple or list of (i, shift, limit); x: None or a list. */
static int word_at(PyObject *list, const Py_buffer *view, Py_ssize_t pos, unsigned long *w) {
  if (list) {
    if (pos >= PyList_GET_SIZE(list)) goto out;
    *w = PyLong_AsUnsignedLong(PyList_GET_ITEM(list, pos));
    return (*w == (unsigned long)-1 && PyErr_Occurred()) ? -1 : 0;
  }
  if (pos * view->itemsize >= view->len) goto out;
  *w = view->itemsize == 1 ? ((const unsigned char *)view->buf)[pos]
                           : ((const unsigned short *)view->buf)[pos];
  return 0;
out:
  PyErr_SetString(PyExc_IndexError, "randbelow_draws: ran out of words");
  return -1;
}

static PyObject *randbelow_draws(PyObject *module, PyObject *args) {
  PyObject *top_bits, *steps, *x = Py_None, *list = NULL, *seq = NULL, *draws = NULL;
  Py_ssize_t pos;
  Py_buffer view = {0};
  if (!PyArg_ParseTuple(args, "OnO|O", &top_bits, &pos, &steps, &x)) return NULL;
  if (x != Py_None && !PyList_Check(x)) {
    PyErr_SetString(PyExc_TypeError, "randbelow_draws: x must be None or a list");
    return NULL;
  }
  if (PyList_Check(top_bits)) {
    list = top_bits;
  } else {
    if (PyObject_GetBuffer(top_bits, &view, PyBUF_FORMAT) < 0) return NULL;
    if (!(view.itemsize == 1 || (view.itemsize == 2 && view.format && !strcmp(view.format, "H")))) {
      PyErr_SetString(PyExc_TypeError, "randbelow_draws: top_bits must be bytes or array('H')");
      goto fail;
    }
  }
  if (pos < 0) {
    PyErr_SetString(PyExc_IndexError, "randbelow_draws: negative pos");
    goto fail;
  }
  seq = PySequence_Fast(steps, "randbelow_draws: steps must be a sequence");
  if (!seq || !(draws = PyList_New(0))) goto fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject **items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t s = 0; s < n; s++) {
    Py_ssize_t i;
    int shift;
    unsigned long limit, w;
    PyObject *step = items[s];
    if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3) {
      PyErr_SetString(PyExc_TypeError, "randbelow_draws: a step must be (i, shift, limit)");
      goto fail;
    }
    i = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 0));
    shift = (int)PyLong_AsLong(PyTuple_GET_ITEM(step, 1));
    limit = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(step, 2));
    if (PyErr_Occurred()) goto fail;
    if (shift < 0 || shift > 31) {
      PyErr_SetString(PyExc_ValueError, "randbelow_draws: shift out of range");
      goto fail;
    }
    do {
      if (word_at(list, &view, pos, &w) < 0) goto fail;
      pos++;
    } while (w >= limit);
    Py_ssize_t j = (Py_ssize_t)(w >> shift);
    if (x == Py_None) {
      PyObject *value = PyLong_FromSsize_t(j);
      if (!value || PyList_Append(draws, value) < 0) {
        Py_XDECREF(value);
        goto fail;
      }
      Py_DECREF(value);
    } else {
      if (i < 0 || i >= PyList_GET_SIZE(x) || j >= PyList_GET_SIZE(x)) {
        PyErr_SetString(PyExc_IndexError, "randbelow_draws: list index out of range");
        goto fail;
      }
      PyObject *item = PyList_GET_ITEM(x, i);
      Py_INCREF(item);
      PyObject *old = PyList_GET_ITEM(x, j);
      PyList_SET_ITEM(x, j, item);
      Py_DECREF(old);
    }
  }
  Py_DECREF(seq);
  if (!list) PyBuffer_Release(&view);
  PyObject *result = Py_BuildValue("(Nn)", draws, pos);
  return result;
fail:
  Py_XDECREF(seq);
  Py_XDECREF(draws);
  if (!list && view.obj) PyBuffer_Release(&view);
  return NULL;
}

static PyMethodDef module_methods[] = {
    {"randbelow_draws", (PyCFunction)randbelow_draws, METH_VARARGS,
     "randbelow_draws(top_bits, pos, steps, x=None) -> (draws, pos): random_replay's, in C."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_word_table",
                                    "The hot loop of tokenization.py's batch methods.", -1,
                                    module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__word_table(void) {
  for (Py_UCS4 c = 0; c < 256; c++) is_space_latin1[c] = Py_UNICODE_ISSPACE(c) ? 1 : 0;
  if (PyType_Ready(&WordTableType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&WordTableType);
  if (PyModule_AddObject(m, "WordTable", (PyObject *)&WordTableType) < 0) {
    Py_DECREF(&WordTableType);
    Py_DECREF(m);
    return NULL;
  }
#ifdef SOURCE_SHA256
  /* setup.py compiles in the SHA-256 of this file: tokenization.py compares it with the
     source beside it and ignores a module built from an older _word_table.c. */
  if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
    Py_DECREF(m);
    return NULL;
  }
#endif
  return m;
}
