/* stepscope.record.native._native: take_block, finished calls into a span block (declared in block.h). */

#include "block.h" /* (first: Python.h before any system header) */

#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BLOCK_LE 1
#else
#define BLOCK_LE 0
#endif

/* the format (core/spanformat.py) through layout.h: SSB_MAGIC, the head, the alignment, NO_PARENT, NO_ERROR and each
   column's position come from there; what a column holds is written below, one writer per column */
_Static_assert(SSB_INT_COLUMNS == 5 && SSB_CODE_COLUMNS == 3,
               "the span block format's columns changed: encode_block writes each one, update it");
_Static_assert(sizeof(SSB_MAGIC) - 1 == 4 && SSB_HEAD_BYTES == 12, "the head is magic, u32 n, u32 header bytes");

/* code of key in the dict map (adding it, and to list, when new); -1 on error */
static int32_t code_of(PyObject *map, PyObject *list, PyObject *key) {
    PyObject *c = PyDict_GetItemWithError(map, key);
    if (c != NULL) return (int32_t)PyLong_AsLong(c);
    if (PyErr_Occurred()) return -1;
    PyObject *v = PyLong_FromSsize_t(PyList_GET_SIZE(list));
    if (v == NULL || PyDict_SetItem(map, key, v) < 0 || PyList_Append(list, key) < 0) { Py_XDECREF(v); return -1; }
    Py_DECREF(v);
    return (int32_t)PyList_GET_SIZE(list) - 1;
}

/* rows [0, k) as a block body; NULL with an exception set on error */
static PyObject *encode_block(Py_ssize_t k, PyObject *dumps, int32_t *name_c, int32_t *op_c, int32_t *err_c) {
    PyObject *body = NULL, *head = NULL, *text = NULL, *utf = NULL;
    int32_t *by_idx = NULL;
    PyObject *hn = PyList_New(0), *ho = PyList_New(0), *he = PyList_New(0), *ha = PyList_New(0);
    PyObject *nmap = PyDict_New(), *omap = PyDict_New(), *emap = PyDict_New();
    Py_ssize_t nidx = PyList_GET_SIZE(names);
    by_idx = (int32_t *)malloc(sizeof(int32_t) * 2 * (nidx ? nidx : 1)); /* code index -> its name, op codes */
    if (!hn || !ho || !he || !ha || !nmap || !omap || !emap || !by_idx) goto done;
    for (Py_ssize_t j = 0; j < 2 * nidx; j++) by_idx[j] = -1;
    for (Py_ssize_t i = 0; i < k; i++) {
        int32_t x = recs[i].idx;
        if (by_idx[2 * x] < 0) {
            PyObject *no = PyList_GET_ITEM(names, x);
            if ((by_idx[2 * x] = code_of(nmap, hn, PyTuple_GET_ITEM(no, 0))) < 0) goto done;
            if ((by_idx[2 * x + 1] = code_of(omap, ho, PyTuple_GET_ITEM(no, 1))) < 0) goto done;
        }
        name_c[i] = by_idx[2 * x];
        op_c[i] = by_idx[2 * x + 1];
        err_c[i] = SSB_NO_ERROR;
        if (recs[i].err != NULL) {
            PyObject *e = PyObject_CallOneArg(error_name, recs[i].err);
            if (e == NULL) goto done;
            err_c[i] = code_of(emap, he, e);
            Py_DECREF(e);
            if (err_c[i] < 0) goto done;
        }
        if (recs[i].step >= 0) {
            PyObject *row = Py_BuildValue("[n{sLsO}]", i, "diffusion.step", (long long)recs[i].step, "diffusion.nested",
                                          Py_True);
            if (row == NULL || PyList_Append(ha, row) < 0) { Py_XDECREF(row); goto done; }
            Py_DECREF(row);
        }
    }
    head = Py_BuildValue("{sOsOsOsO}", "names", hn, "ops", ho, "errors", he, "attrs", ha);
    if (head == NULL || (text = PyObject_CallOneArg(dumps, head)) == NULL) goto done;
    if ((utf = PyUnicode_AsUTF8String(text)) == NULL) goto done;
    Py_ssize_t h = PyBytes_GET_SIZE(utf), hp = (h + SSB_HEADER_ALIGN - 1) / SSB_HEADER_ALIGN * SSB_HEADER_ALIGN;
    body = PyBytes_FromStringAndSize(NULL, SSB_HEAD_BYTES + hp + k * (8 * SSB_INT_COLUMNS + 4 * SSB_CODE_COLUMNS));
    if (body == NULL) goto done;
    char *p = PyBytes_AS_STRING(body);
    uint32_t n32 = (uint32_t)k, h32 = (uint32_t)hp;
    memcpy(p, SSB_MAGIC, 4);
    memcpy(p + 4, &n32, 4);
    memcpy(p + 8, &h32, 4);
    memcpy(p + SSB_HEAD_BYTES, PyBytes_AS_STRING(utf), h);
    memset(p + SSB_HEAD_BYTES + h, ' ', hp - h);
    char *ints = p + SSB_HEAD_BYTES + hp, *codes = ints + 8 * k * SSB_INT_COLUMNS;
#define INT_AT(col, i) (ints + 8 * (k * (col) + (i)))
    for (Py_ssize_t i = 0; i < k; i++) memcpy(INT_AT(SSB_INT_ID, i), &recs[i].sid, 8);
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t v = recs[i].parent ? recs[i].parent : SSB_NO_PARENT;
        memcpy(INT_AT(SSB_INT_PARENT, i), &v, 8);
    }
    for (Py_ssize_t i = 0; i < k; i++) memcpy(INT_AT(SSB_INT_START, i), &recs[i].start, 8);
    for (Py_ssize_t i = 0; i < k; i++) memcpy(INT_AT(SSB_INT_END, i), &recs[i].end, 8);
    for (Py_ssize_t i = 0; i < k; i++) { int64_t v = (int64_t)recs[i].tid; memcpy(INT_AT(SSB_INT_THREAD, i), &v, 8); }
#undef INT_AT
    memcpy(codes + 4 * k * SSB_CODE_NAME, name_c, 4 * k);
    memcpy(codes + 4 * k * SSB_CODE_OP, op_c, 4 * k);
    memcpy(codes + 4 * k * SSB_CODE_ERROR, err_c, 4 * k);
done:
    free(by_idx);
    Py_XDECREF(hn); Py_XDECREF(ho); Py_XDECREF(he); Py_XDECREF(ha);
    Py_XDECREF(nmap); Py_XDECREF(omap); Py_XDECREF(emap);
    Py_XDECREF(head); Py_XDECREF(text); Py_XDECREF(utf);
    return body;
}

PyObject *py_take_block(PyObject *m, PyObject *args) {
    PyObject *dumps;
    Py_ssize_t maxn;
    if (!PyArg_ParseTuple(args, "On", &dumps, &maxn)) return NULL;
    if (n_fin == 0 || !BLOCK_LE || maxn <= 0) Py_RETURN_NONE;
    Py_ssize_t k = n_fin < maxn ? n_fin : maxn;
    int32_t *codes = (int32_t *)malloc(sizeof(int32_t) * 3 * k);
    if (codes == NULL) return PyErr_NoMemory();
    PyObject *body = encode_block(k, dumps, codes, codes + k, codes + 2 * k);
    free(codes);
    if (body == NULL) return NULL; /* (nothing taken: the calls stay for the next try) */
    PyObject *out = Py_BuildValue("(NnL)", body, k, (long long)recs[0].sid);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < k; i++) Py_XDECREF(recs[i].err);
    Py_ssize_t rest = n_fin - k;
    if (rest > 0) {
        memmove(recs, recs + k, sizeof(Rec) * rest);
    }
    n_fin = rest;
    return out;
}
