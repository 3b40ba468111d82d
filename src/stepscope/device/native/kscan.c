/* stepscope.device.native._kscan: the traceEvents array of a Kineto / Chrome trace (Chrome's "Trace Event Format":
 * a JSON array of event objects) scanned straight into columns, for device/kineto.py's load.
 *
 * scan(buf) reads the document (the object with traceEvents, or the bare array of events) and returns
 *   (n, (cat, name, pid, tid, ts, dur, corr, ext, stream, device, bytes, raws), tokens, top)
 * where n is the number of complete events ("ph": "X"); cat, name, pid, tid: bytearrays of n int32, each an index
 * into that field's list in
 * `tokens` (a 4-tuple, name cat pid tid: the distinct raw JSON tokens of the field, in the order first seen among the
 * complete events; -1: the field is absent; an absent name is the token "", msgspec's default); then bytearrays of n
 * int64: ts and dur in ns (rint(us * 1000), round half to even, as numpy's rint), the args' correlation, External
 * id, stream, device and bytes (-1 when absent or null; a float is truncated to an integer); raws: a bytearray of
 * int64 quadruples (event, key, start, end): the byte spans of args' "Input Dims" (key 0), "Concrete Inputs" (1)
 * and "Input type" (2) in the buffer; top: the document's other members as (raw key, raw value) bytes pairs.
 *
 * It returns None whenever the input is anything it does not reproduce exactly as the msgspec reader would (then
 * that reader runs): malformed JSON, a key with an escape, a repeated key, a phase outside the Trace Event Format's
 * list, a complete event without a numeric ts, ids that are strings or out of the int64 range, nesting deeper than
 * MAX_DEPTH. Strings are checked as JSON requires (escapes, control characters, UTF-8). The GIL is held throughout.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "jsonlex.h"
#include "kscan.h"

/* ---- growable buffers and the token table --------------------------------------------------------------------- */

/* A column: a bytearray written in place and handed to Python as it is (shrunk to its length: no copy of the data;
 * reserved at the scan's start for as many events as the document could hold, so that it rarely grows: pages never
 * written are never resident). */
typedef struct {
    PyObject *ba;
    char *data;
    size_t len, cap;
} Buf;

static int reserve(Buf *b, size_t cap) {
    if (b->ba == NULL) {
        b->ba = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)cap);
    } else if (PyByteArray_Resize(b->ba, (Py_ssize_t)cap) < 0) {
        return -1;
    }
    if (b->ba == NULL) return -1;
    b->data = PyByteArray_AS_STRING(b->ba);
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *x, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        if (reserve(b, cap) < 0) return -1;
    }
    memcpy(b->data + b->len, x, n);
    b->len += n;
    return 0;
}

/* The column's bytearray, shrunk to its length (a new reference; the Buf gives it up). */
static PyObject *take(Buf *b) {
    if (b->ba == NULL && reserve(b, 0) < 0) return NULL;
    if (PyByteArray_Resize(b->ba, (Py_ssize_t)b->len) < 0) return NULL;
    PyObject *ba = b->ba;
    b->ba = NULL;
    b->data = NULL;
    return ba;
}

typedef struct {
    uint32_t *slots; /* token index + 1, 0: empty */
    size_t mask;
    PyObject *list; /* the distinct tokens (bytes), in order */
    const unsigned char **start;
    Py_ssize_t *size;
    Py_ssize_t n, cap;
} Tokens;

static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}

static int tokens_init(Tokens *t) {
    memset(t, 0, sizeof(*t));
    t->mask = 1023;
    t->slots = PyMem_Calloc(t->mask + 1, sizeof(uint32_t));
    t->list = PyList_New(0);
    return (t->slots && t->list) ? 0 : -1;
}

static void tokens_free(Tokens *t) {
    PyMem_Free(t->slots);
    PyMem_Free(t->start);
    PyMem_Free(t->size);
    Py_XDECREF(t->list);
}

/* The index of the token [p, p + n) (added when new), or -1 on a memory error. */
static int32_t token(Tokens *t, const unsigned char *p, Py_ssize_t n) {
    uint64_t h = hash_bytes(p, n);
    size_t i = h & t->mask;
    while (t->slots[i]) {
        uint32_t k = t->slots[i] - 1;
        if (t->size[k] == n && memcmp(t->start[k], p, n) == 0) return (int32_t)k;
        i = (i + 1) & t->mask;
    }
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? 2 * t->cap : 256;
        const unsigned char **s = PyMem_Realloc(t->start, cap * sizeof(*s));
        if (s == NULL) return -1;
        t->start = s;
        Py_ssize_t *z = PyMem_Realloc(t->size, cap * sizeof(*z));
        if (z == NULL) return -1;
        t->size = z;
        t->cap = cap;
    }
    PyObject *b = PyBytes_FromStringAndSize((const char *)p, n);
    if (b == NULL || PyList_Append(t->list, b) < 0) { Py_XDECREF(b); return -1; }
    Py_DECREF(b);
    t->start[t->n] = p;
    t->size[t->n] = n;
    t->slots[i] = (uint32_t)(t->n + 1);
    t->n++;
    if ((size_t)t->n * 2 > t->mask) { /* grow: rehash */
        size_t mask = t->mask * 2 + 1;
        uint32_t *slots = PyMem_Calloc(mask + 1, sizeof(uint32_t));
        if (slots == NULL) return -1;
        for (Py_ssize_t k = 0; k < t->n; k++) {
            size_t j = hash_bytes(t->start[k], t->size[k]) & mask;
            while (slots[j]) j = (j + 1) & mask;
            slots[j] = (uint32_t)(k + 1);
        }
        PyMem_Free(t->slots);
        t->slots = slots;
        t->mask = mask;
    }
    return (int32_t)(t->n - 1);
}

/* ---- values ---------------------------------------------------------------------------------------------------- */

/* A string, number or null token (what a name, cat, pid or tid may be): its index in `t`. */
static int scalar_token(Cur *c, Tokens *t, int32_t *out, int allow_number) {
    const unsigned char *s = c->p;
    int esc, isint;
    if (s >= c->end) return BAIL;
    if (*s == '"') { if (string(c, &esc)) return BAIL; }
    else if (*s == 'n') { if (literal(c, "null")) return BAIL; }
    else if (allow_number && (*s == '-' || (*s >= '0' && *s <= '9'))) { if (number(c, &isint)) return BAIL; }
    else return BAIL;
    int32_t k = token(t, s, c->p - s);
    if (k < 0) return -1;
    *out = k;
    return 0;
}

/* ts or dur: a number in us -> ns, rint(x * 1000) as int64 (numpy: the float64 product, rounded half to even). */
static int micros(Cur *c, int64_t *out) {
    const unsigned char *s = c->p;
    int isint;
    if (s >= c->end || !(*s == '-' || (*s >= '0' && *s <= '9')) || number(c, &isint)) return BAIL;
    double x;
    if (isint) {
        int64_t v;
        if (to_int64(s, c->p, &v)) return BAIL;
        x = (double)v;
    } else if (to_double(s, c->p, &x)) {
        return BAIL;
    }
    double ns = nearbyint(x * 1000.0);
    if (!(ns > -9.2e18 && ns < 9.2e18)) return BAIL;
    *out = (int64_t)ns;
    return 0;
}

/* An id in args: an integer, a float (truncated, as int() does), or null (-1); anything else is the reader's. */
static int id_value(Cur *c, int64_t *out) {
    const unsigned char *s = c->p;
    int isint;
    if (s >= c->end) return BAIL;
    if (*s == 'n') { if (literal(c, "null")) return BAIL; *out = -1; return 0; }
    if (!(*s == '-' || (*s >= '0' && *s <= '9')) || number(c, &isint)) return BAIL;
    if (isint) return to_int64(s, c->p, out);
    double x;
    if (to_double(s, c->p, &x)) return BAIL;
    if (!(x > -9.2e18 && x < 9.2e18)) return BAIL;
    *out = (int64_t)x; /* (truncation toward zero) */
    return 0;
}

/* A key: a string without escapes; [s, s + n) its bytes within the quotes. Leaves c->p after the ':'. */
static int key(Cur *c, const unsigned char **s, Py_ssize_t *n) {
    int esc;
    ws(c);
    if (c->p >= c->end || *c->p != '"') return BAIL;
    const unsigned char *q = c->p;
    if (string(c, &esc) || esc) return BAIL;
    *s = q + 1;
    *n = c->p - q - 2;
    ws(c);
    if (c->p >= c->end || *c->p != ':') return BAIL;
    c->p++;
    ws(c);
    return 0;
}

/* After a member's value: ',' (1: another member) or '}' (0: the object's end). */
static int next_member(Cur *c, int *more) {
    ws(c);
    if (c->p >= c->end) return BAIL;
    if (*c->p == ',') { c->p++; *more = 1; return 0; }
    if (*c->p == '}') { c->p++; *more = 0; return 0; }
    return BAIL;
}

/* The Trace Event Format's phases other than X (device/kineto.py's _OTHER): skipped. */
static int other_phase(const unsigned char *s, Py_ssize_t n) {
    static const char *const phases[] = {"B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s",
                                         "t", "f", "P", "O", "N", "D", "M", "V", "v", "R", "c", "(", ")"};
    for (size_t k = 0; k < sizeof(phases) / sizeof(phases[0]); k++)
        if (n == 1 && s[0] == (unsigned char)phases[k][0]) return 1;
    return 0;
}

typedef struct {
    Buf cat, name, pid, tid, ts, dur, ids[5], raws;
    Tokens tokens[4]; /* of name, cat, pid, tid */
    Py_ssize_t n;
} Out;

static const char *const ID_KEYS[5] = {"correlation", "External id", "stream", "device", "bytes"};
static const char *const RAW_KEYS[3] = {"Input Dims", "Concrete Inputs", "Input type"};
static const Py_ssize_t ID_LEN[5] = {11, 11, 6, 6, 5}, RAW_LEN[3] = {10, 15, 10};

/* args of a complete event: the ids and the raw spans. */
static int args_object(Cur *c, Out *o, int64_t ids[5], Py_ssize_t event) {
    const unsigned char *ks;
    Py_ssize_t kn;
    int more, seen = 0;
    if (c->p >= c->end || *c->p != '{') return BAIL;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    do {
        if (key(c, &ks, &kn)) return BAIL;
        int hit = 0;
        for (int k = 0; k < 5 && !hit; k++)
            if (ID_LEN[k] == kn && memcmp(ks, ID_KEYS[k], kn) == 0) {
                if (seen & (1 << k)) return BAIL;
                seen |= 1 << k;
                if (id_value(c, &ids[k])) return BAIL;
                hit = 1;
            }
        for (int k = 0; k < 3 && !hit; k++)
            if (RAW_LEN[k] == kn && memcmp(ks, RAW_KEYS[k], kn) == 0) {
                if (seen & (1 << (5 + k))) return BAIL;
                seen |= 1 << (5 + k);
                const unsigned char *s = c->p;
                if (skip(c)) return BAIL;
                int64_t q[4] = {event, k, s - c->base, c->p - c->base};
                if (put(&o->raws, q, sizeof(q))) return -1;
                hit = 1;
            }
        if (!hit && skip(c)) return BAIL;
        if (next_member(c, &more)) return BAIL;
    } while (more);
    return 0;
}

static int whole_token(Cur *c, const unsigned char *s, const unsigned char *e, Tokens *t, int32_t *out, int num) {
    Cur sub = {s, e, c->base};
    int rc = scalar_token(&sub, t, out, num);
    return rc ? rc : (sub.p != e ? BAIL : 0);
}

static int whole_micros(const unsigned char *s, const unsigned char *e, int64_t *out) {
    Cur sub = {s, e, s};
    return micros(&sub, out) || sub.p != e ? BAIL : 0;
}

/* One event object at c->p: its members skipped (checked) and the spans of the fields kept; only a complete event's
 * fields are then read (another phase's fields are never looked at, as the msgspec reader skips them). */
static int event(Cur *c, Out *o) {
    static const char *const FIELDS[8] = {"ph", "name", "cat", "ts", "dur", "pid", "tid", "args"};
    static const int FIELD_LEN[8] = {2, 4, 3, 2, 3, 3, 3, 4};
    const unsigned char *ks, *fs[8] = {0}, *fe[8] = {0};
    Py_ssize_t kn;
    int more, rc;
    if (c->p >= c->end || *c->p != '{') return BAIL;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') return BAIL; /* (no ph) */
    do {
        if (key(c, &ks, &kn)) return BAIL;
        int f = -1;
        if (kn >= 2 && kn <= 4)
            for (int k = 0; k < 8; k++)
                if ((Py_ssize_t)FIELD_LEN[k] == kn && memcmp(ks, FIELDS[k], kn) == 0) { f = k; break; }
        if (f >= 0 && fs[f] != NULL) return BAIL; /* (a repeated key) */
        const unsigned char *s = c->p;
        if (skip(c)) return BAIL;
        if (f >= 0) { fs[f] = s; fe[f] = c->p; }
        if (next_member(c, &more)) return BAIL;
    } while (more);
    /* the phase: a string, X or another of the format's */
    if (fs[0] == NULL || *fs[0] != '"' || fe[0] - fs[0] < 2) return BAIL;
    for (const unsigned char *q = fs[0]; q < fe[0]; q++)
        if (*q == '\\') return BAIL;
    if (!(fe[0] - fs[0] == 3 && fs[0][1] == 'X')) return other_phase(fs[0] + 1, fe[0] - fs[0] - 2) ? 0 : BAIL;
    int32_t cat = -1, name = -1, pid = -1, tid = -1;
    int64_t ts = 0, dur = 0, ids[5] = {-1, -1, -1, -1, -1};
    if (fs[3] == NULL || whole_micros(fs[3], fe[3], &ts)) return BAIL; /* (no ts, null, not a number) */
    if (fs[4] != NULL && whole_micros(fs[4], fe[4], &dur)) return BAIL;
    if (fs[1] != NULL) {
        if ((rc = whole_token(c, fs[1], fe[1], &o->tokens[0], &name, 1))) return rc;
    } else if ((name = token(&o->tokens[0], (const unsigned char *)"\"\"", 2)) < 0) { /* (the default name: "") */
        return -1;
    }
    if (fs[2] != NULL && (rc = whole_token(c, fs[2], fe[2], &o->tokens[1], &cat, 0))) return rc;
    if (fs[5] != NULL && (rc = whole_token(c, fs[5], fe[5], &o->tokens[2], &pid, 1))) return rc;
    if (fs[6] != NULL && (rc = whole_token(c, fs[6], fe[6], &o->tokens[3], &tid, 1))) return rc;
    if (fs[7] != NULL) {
        Cur a = {fs[7], fe[7], c->base};
        size_t raws_before = o->raws.len;
        if ((rc = args_object(&a, o, ids, o->n))) { o->raws.len = raws_before; return rc; }
    }
    if (put(&o->cat, &cat, 4) || put(&o->name, &name, 4) || put(&o->pid, &pid, 4) || put(&o->tid, &tid, 4) ||
        put(&o->ts, &ts, 8) || put(&o->dur, &dur, 8))
        return -1;
    for (int k = 0; k < 5; k++)
        if (put(&o->ids[k], &ids[k], 8)) return -1;
    o->n++;
    return 0;
}

/* The events array at c->p. */
static int events(Cur *c, Out *o) {
    int rc;
    if (c->p >= c->end || *c->p != '[') return BAIL;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == ']') { c->p++; return 0; }
    for (;;) {
        ws(c);
        if ((rc = event(c, o))) return rc;
        ws(c);
        if (c->p < c->end && *c->p == ',') { c->p++; continue; }
        if (c->p < c->end && *c->p == ']') { c->p++; return 0; }
        return BAIL;
    }
}

/* The document's object at c->p: traceEvents scanned where it stands (one pass over the file), every other member
 * checked and listed in `top` as (raw key token, raw value) bytes, in file order. */
static int top_object(Cur *c, Out *o, PyObject *top) {
    int more, esc, rc, found = 0;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') return BAIL; /* (no traceEvents) */
    do {
        ws(c);
        const unsigned char *k = c->p;
        if (k >= c->end || *k != '"' || string(c, &esc)) return BAIL;
        const unsigned char *ke = c->p;
        ws(c);
        if (c->p >= c->end || *c->p != ':') return BAIL;
        c->p++;
        ws(c);
        if (esc) return BAIL; /* (a key that might read "traceEvents") */
        if (ke - k == 13 && memcmp(k + 1, "traceEvents", 11) == 0) {
            if (found) return BAIL;
            found = 1;
            if ((rc = events(c, o))) return rc;
        } else {
            const unsigned char *v = c->p;
            if (skip(c)) return BAIL;
            PyObject *item = Py_BuildValue("(y#y#)", k, (Py_ssize_t)(ke - k), v, (Py_ssize_t)(c->p - v));
            if (item == NULL || PyList_Append(top, item) < 0) { Py_XDECREF(item); return -1; }
            Py_DECREF(item);
        }
        if (next_member(c, &more)) return BAIL;
    } while (more);
    return found ? 0 : BAIL;
}

static Buf *bufs_of(Out *o, int k) {
    Buf *bufs[] = {&o->cat, &o->name, &o->pid, &o->tid, &o->ts, &o->dur, &o->ids[0], &o->ids[1], &o->ids[2],
                   &o->ids[3], &o->ids[4], &o->raws};
    return bufs[k];
}

#define NBUFS 12

static void out_free(Out *o) {
    for (int k = 0; k < NBUFS; k++) Py_CLEAR(bufs_of(o, k)->ba);
    for (int k = 0; k < 4; k++) tokens_free(&o->tokens[k]);
}

static PyObject *scan(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o;
    memset(&o, 0, sizeof(o));
    PyObject *result = NULL;
    int rc = 0;
    for (int k = 0; k < 4 && rc == 0; k++) rc = tokens_init(&o.tokens[k]);
    PyObject *top = PyList_New(0);
    if (top == NULL) rc = -1;
    /* a complete Kineto event is rarely under 48 bytes of JSON: room for len / 48 of them, reserved, not touched */
    size_t guess = (size_t)view.len / 48 + 64;
    for (int k = 0; k < NBUFS - 1 && rc == 0; k++)
        rc = reserve(bufs_of(&o, k), guess * (k < 4 ? 4 : 8)) < 0 ? -1 : 0;
    if (rc == 0) {
        Cur c = {view.buf, (const unsigned char *)view.buf + view.len, view.buf};
        ws(&c);
        if (c.p < c.end && *c.p == '{') rc = top_object(&c, &o, top);
        else rc = events(&c, &o);
        if (rc == 0) {
            ws(&c);
            if (c.p != c.end) rc = BAIL;
        }
    }
    if (rc == 0) {
        PyObject *cols = PyTuple_New(NBUFS);
        for (int k = 0; cols != NULL && k < NBUFS; k++) {
            PyObject *ba = take(bufs_of(&o, k));
            if (ba == NULL) Py_CLEAR(cols);
            else PyTuple_SET_ITEM(cols, k, ba);
        }
        if (cols != NULL)
            result = Py_BuildValue("(nN(OOOO)O)", o.n, cols, o.tokens[0].list, o.tokens[1].list, o.tokens[2].list,
                                   o.tokens[3].list, top);
    } else if (rc == BAIL) {
        result = Py_NewRef(Py_None);
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    Py_XDECREF(top);
    out_free(&o);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O,
     "scan(document: bytes-like) -> (n, columns, tokens, top) | None: a Kineto trace's complete events as columns "
     "(see kscan.c), or None where the msgspec reader must read it."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kscan",
                                    "The traceEvents array of a Kineto trace scanned into columns (kscan.c).", -1, methods};

PyMODINIT_FUNC PyInit__kscan(void) {
    jsonlex_init();
    return PyModule_Create(&module);
}
