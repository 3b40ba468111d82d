/* JSON lexing for the trace scanner (jsonlex.c): a cursor over a buffer, each function reading one token or value
 * at the cursor and moving past it, returning 0, or BAIL where the text is not JSON (RFC 8259) as it reads it. */
#ifndef STEPSCOPE_JSONLEX_H
#define STEPSCOPE_JSONLEX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MAX_DEPTH 1000
#define BAIL 1

typedef struct {
    const unsigned char *p, *end, *base; /* the cursor, the end of the text, the buffer's start (offsets) */
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

void jsonlex_init(void);
int string(Cur *c, int *escaped);
int number(Cur *c, int *is_int);
int literal(Cur *c, const char *word);
int skip(Cur *c);
int to_double(const unsigned char *s, const unsigned char *e, double *out);
int to_double_slow(const unsigned char *s, const unsigned char *e, double *out);
int to_int64(const unsigned char *s, const unsigned char *e, int64_t *out);

#endif
