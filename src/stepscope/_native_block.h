/* stepscope._native, part of _native.c (included there): take_block, the finished calls drained straight into a
   span block (store/spanblock.py's layout "SSB1"), with no Python object per call: the recorder thread's flush
   holds the GIL for a fraction of what building a tuple per call and encoding them took. */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BLOCK_LE 1
#else
#define BLOCK_LE 0
#endif

static const int64_t NO_PARENT = INT64_MIN; /* spanblock.NO_PARENT */

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
        int32_t x = c_idx[i];
        if (by_idx[2 * x] < 0) {
            PyObject *no = PyList_GET_ITEM(names, x);
            if ((by_idx[2 * x] = code_of(nmap, hn, PyTuple_GET_ITEM(no, 0))) < 0) goto done;
            if ((by_idx[2 * x + 1] = code_of(omap, ho, PyTuple_GET_ITEM(no, 1))) < 0) goto done;
        }
        name_c[i] = by_idx[2 * x];
        op_c[i] = by_idx[2 * x + 1];
        err_c[i] = -1;
        if (c_err[i] != NULL) {
            PyObject *e = PyObject_CallOneArg(error_name, c_err[i]);
            if (e == NULL) goto done;
            err_c[i] = code_of(emap, he, e);
            Py_DECREF(e);
            if (err_c[i] < 0) goto done;
        }
        if (c_step[i] >= 0) {
            PyObject *row = Py_BuildValue("[n{sLsO}]", i, "diffusion.step", (long long)c_step[i], "diffusion.nested",
                                          Py_True);
            if (row == NULL || PyList_Append(ha, row) < 0) { Py_XDECREF(row); goto done; }
            Py_DECREF(row);
        }
    }
    head = Py_BuildValue("{sOsOsOsO}", "names", hn, "ops", ho, "errors", he, "attrs", ha);
    if (head == NULL || (text = PyObject_CallOneArg(dumps, head)) == NULL) goto done;
    if ((utf = PyUnicode_AsUTF8String(text)) == NULL) goto done;
    Py_ssize_t h = PyBytes_GET_SIZE(utf), hp = (h + 7) / 8 * 8;
    body = PyBytes_FromStringAndSize(NULL, 12 + hp + k * (5 * 8 + 3 * 4));
    if (body == NULL) goto done;
    char *p = PyBytes_AS_STRING(body);
    uint32_t n32 = (uint32_t)k, h32 = (uint32_t)hp;
    memcpy(p, "SSB1", 4);
    memcpy(p + 4, &n32, 4);
    memcpy(p + 8, &h32, 4);
    memcpy(p + 12, PyBytes_AS_STRING(utf), h);
    memset(p + 12 + h, ' ', hp - h);
    p += 12 + hp;
    memcpy(p, c_sid, 8 * k); p += 8 * k;
    for (Py_ssize_t i = 0; i < k; i++) { int64_t v = c_parent[i] ? c_parent[i] : NO_PARENT; memcpy(p + 8 * i, &v, 8); }
    p += 8 * k;
    memcpy(p, c_start, 8 * k); p += 8 * k;
    memcpy(p, c_end, 8 * k); p += 8 * k;
    for (Py_ssize_t i = 0; i < k; i++) { int64_t v = (int64_t)c_tid[i]; memcpy(p + 8 * i, &v, 8); }
    p += 8 * k;
    memcpy(p, name_c, 4 * k); p += 4 * k;
    memcpy(p, op_c, 4 * k); p += 4 * k;
    memcpy(p, err_c, 4 * k);
done:
    free(by_idx);
    Py_XDECREF(hn); Py_XDECREF(ho); Py_XDECREF(he); Py_XDECREF(ha);
    Py_XDECREF(nmap); Py_XDECREF(omap); Py_XDECREF(emap);
    Py_XDECREF(head); Py_XDECREF(text); Py_XDECREF(utf);
    return body;
}

static PyObject *py_take_block(PyObject *m, PyObject *args) {
    /* take_block(dumps, max_spans) -> (body, n, first span id) of the oldest finished calls, or None */
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
    PyObject *out = Py_BuildValue("(NnL)", body, k, (long long)c_sid[0]);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < k; i++) Py_XDECREF(c_err[i]);
    Py_ssize_t rest = n_fin - k;
    if (rest > 0) {
#define SHIFT(col) memmove(col, col + k, sizeof(*col) * rest);
        SHIFT(c_sid) SHIFT(c_parent) SHIFT(c_start) SHIFT(c_end) SHIFT(c_step) SHIFT(c_idx) SHIFT(c_tid) SHIFT(c_err)
#undef SHIFT
    }
    n_fin = rest;
    return out;
}
