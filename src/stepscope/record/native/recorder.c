/* stepscope.record.native._native: the recorder's state (declared in recorder.h): per-thread stacks of open calls,
   the columns of finished ones, the code table, and the denoiser lookups the callbacks need. */

#include "recorder.h" /* (first: Python.h before any system header) */

#include <string.h>

__thread TState *tls = NULL;
static pthread_key_t tls_key;
pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
TState *states = NULL;

_Static_assert(sizeof(Rec) == 64, "a finished call is one cache line");
Rec *recs = NULL;
Py_ssize_t n_fin = 0, cap_fin = 0;
Py_ssize_t max_fin = 1000000;
int64_t dropped = 0;

int64_t last_sid = 0;
PyObject *names = NULL;
PyObject *probe_objs = NULL;
char *gen_flags = NULL;
Py_ssize_t cap_flags = 0;
PyObject *parked = NULL;
PyObject *parked_gen = NULL;
PyObject *orphans = NULL;
PyObject *current_span = NULL;
PyObject *error_name = NULL;
PyObject *disable = NULL;
PyObject *denoisers = NULL;
PyObject *step_key = NULL, *nested_key = NULL;
PyObject *forward[EV_COUNT];
Py_ssize_t extra_index = -1;
int call_wake_on = 0;
int64_t call_wakes = 0;
timer_t call_wake_timer;
int64_t call_wake_t = 0;
unsigned long call_wake_tid = 0;

void fire_call_wake(void) {
    /* (under the GIL, as the recorder thread that sets and clears it: the timer is never deleted meanwhile) */
    struct itimerspec at_once = {{0, 0}, {0, 1}}; /* an absolute time long past: expires at once */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    call_wake_t = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
    call_wake_tid = PyThread_get_thread_ident();
    call_wake_on = 0;
    call_wakes++;
    timer_settime(call_wake_timer, TIMER_ABSTIME, &at_once, NULL);
}

static void call_wake_off_in_child(void) { call_wake_on = 0; } /* (a forked child has no timer of the parent's) */

static void free_state(void *p) {
    /* at a thread's exit (no GIL): unlink its state */
    TState *t = (TState *)p;
    pthread_mutex_lock(&states_lock);
    if (t->prev) t->prev->next = t->next; else states = t->next;
    if (t->next) t->next->prev = t->prev;
    pthread_mutex_unlock(&states_lock);
    free(t->stack);
    free(t);
}

int recorder_init(void) {
    if (pthread_key_create(&tls_key, free_state) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_key_create failed");
        return -1;
    }
    pthread_atfork(NULL, NULL, call_wake_off_in_child);
    extra_index = REQUEST_EXTRA(NULL);
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "no code extra index left");
        return -1;
    }
    names = PyList_New(0);
    probe_objs = PyList_New(0);
    parked = PyDict_New();
    parked_gen = PyDict_New();
    orphans = PyList_New(0);
    denoisers = PySet_New(NULL);
    if (names == NULL || probe_objs == NULL || parked == NULL || parked_gen == NULL || orphans == NULL
        || denoisers == NULL)
        return -1;
    return 0;
}

TState *new_state(void) {
    TState *t = (TState *)calloc(1, sizeof(TState));
    if (t == NULL) return NULL;
    t->cap = 64;
    t->stack = (Frame *)malloc(sizeof(Frame) * t->cap);
    if (t->stack == NULL) { free(t); return NULL; }
    t->tid = PyThread_get_thread_ident();
    pthread_mutex_lock(&states_lock);
    t->next = states;
    if (states) states->prev = t;
    states = t;
    pthread_mutex_unlock(&states_lock);
    pthread_setspecific(tls_key, t);
    tls = t;
    return t;
}

int grow_fin(void) {
    Py_ssize_t cap = cap_fin ? cap_fin * 2 : 65536;
    if (cap > max_fin) cap = max_fin;
    if (cap <= cap_fin) return -1;
    void *p = NULL; /* (on a cache line boundary: a record is one line) */
    if (posix_memalign(&p, 64, sizeof(Rec) * cap) != 0) return -1;
    if (recs != NULL) memcpy(p, recs, sizeof(Rec) * n_fin);
    free(recs);
    recs = (Rec *)p;
    cap_fin = cap;
    return 0;
}

int64_t open_step(void) {
    TState *t = tls;
    if (t != NULL)
        for (Py_ssize_t d = t->depth - 1; d >= 0; d--)
            if (t->stack[d].step >= 0) return t->stack[d].step;
    if (PySet_GET_SIZE(denoisers) == 0) return -1;
    PyObject *v = NULL;
    int64_t step = -1;
    if (PyContextVar_Get(current_span, NULL, &v) < 0) { PyErr_Clear(); return -1; }
    PyObject *rec = v;
    for (int n = 0; rec != NULL && PyList_CheckExact(rec) && PyList_GET_SIZE(rec) == REC_LEN && n < 256; n++) {
        PyObject *attrs = PyList_GET_ITEM(rec, REC_ATTRS);
        if (PyDict_CheckExact(attrs) && PySet_Contains(denoisers, PyList_GET_ITEM(rec, REC_PROBE)) == 1) {
            PyObject *k = PyDict_GetItemWithError(attrs, step_key);
            if (k != NULL && PyLong_CheckExact(k)) { step = PyLong_AsLongLong(k); break; }
        }
        rec = PyList_GET_ITEM(rec, REC_RESTORE);
    }
    if (PyErr_Occurred()) { PyErr_Clear(); step = -1; }
    Py_XDECREF(v);
    return step;
}

int native_top(int32_t idx) {
    TState *t = tls;
    if (t == NULL || t->depth == 0) return 0;
    Frame *f = &t->stack[t->depth - 1];
    return f->idx == idx && f->step >= 0 && f->sid > cv_top();
}
