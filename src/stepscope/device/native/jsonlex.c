/* JSON lexing for the trace scanner (declared in jsonlex.h): strings (escapes, control characters and UTF-8
 * checked), numbers (strict grammar; to double correctly rounded, to int64 exactly), literals, and any value skipped
 * with an explicit stack (no recursion). */

#include "jsonlex.h"

#include <math.h>
#include <string.h>

/* Bytes that end a run of plain string bytes: '"', '\\', control characters and non-ASCII (set by jsonlex_init). */
static unsigned char special[256];

void jsonlex_init(void) {
    for (int ch = 0; ch < 256; ch++) special[ch] = ch < 0x20 || ch >= 0x80 || ch == '"' || ch == '\\';
}

/* A JSON string at c->p (the opening quote); on return c->p is past the closing quote. *escaped: it held a '\'. */
int string(Cur *c, int *escaped) {
    const unsigned char *p = c->p + 1, *end = c->end;
    *escaped = 0;
    while (p < end) {
        while (p < end && !special[*p]) p++;
        if (p >= end) break;
        unsigned char ch = *p;
        if (ch == '"') { c->p = p + 1; return 0; }
        if (ch == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return BAIL;
            unsigned char e = p[1];
            if (e == 'u') {
                if (p + 6 > end) return BAIL;
                for (int k = 2; k < 6; k++)
                    if (!((p[k] >= '0' && p[k] <= '9') || (p[k] >= 'a' && p[k] <= 'f') || (p[k] >= 'A' && p[k] <= 'F')))
                        return BAIL;
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else {
                return BAIL;
            }
            continue;
        }
        if (ch < 0x20) return BAIL;
        if (ch < 0x80) { p++; continue; }
        /* UTF-8: the length from the lead byte, continuation bytes, no overlong form, no surrogate, <= U+10FFFF */
        int len;
        uint32_t cp;
        if (ch >= 0xC2 && ch <= 0xDF) { len = 2; cp = ch & 0x1F; }
        else if (ch >= 0xE0 && ch <= 0xEF) { len = 3; cp = ch & 0x0F; }
        else if (ch >= 0xF0 && ch <= 0xF4) { len = 4; cp = ch & 0x07; }
        else return BAIL;
        if (p + len > end) return BAIL;
        for (int k = 1; k < len; k++) {
            if ((p[k] & 0xC0) != 0x80) return BAIL;
            cp = (cp << 6) | (p[k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return BAIL;
        p += len;
    }
    return BAIL;
}

/* A JSON number at c->p (strict grammar). *is_int: no fraction or exponent. */
int number(Cur *c, int *is_int) {
    const unsigned char *p = c->p, *end = c->end;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return BAIL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return BAIL;
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    c->p = p;
    return 0;
}

int literal(Cur *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return BAIL;
    c->p += n;
    return 0;
}

/* Skips any JSON value (objects and arrays with an explicit stack of their kinds: no recursion). */
int skip(Cur *c) {
    char stack[MAX_DEPTH];
    int depth = 0, esc, isint;
    for (;;) {
        ws(c);
        if (c->p >= c->end) return BAIL;
        unsigned char ch = *c->p;
        if (ch == '{' || ch == '[') {
            if (depth >= MAX_DEPTH) return BAIL;
            stack[depth++] = (char)ch;
            c->p++;
            ws(c);
            if (c->p < c->end && *c->p == (ch == '{' ? '}' : ']')) { c->p++; depth--; goto closed; }
            if (ch == '{') goto key;
            continue;
        }
        if (ch == '"') { if (string(c, &esc)) return BAIL; }
        else if (ch == '-' || (ch >= '0' && ch <= '9')) { if (number(c, &isint)) return BAIL; }
        else if (ch == 't') { if (literal(c, "true")) return BAIL; }
        else if (ch == 'f') { if (literal(c, "false")) return BAIL; }
        else if (ch == 'n') { if (literal(c, "null")) return BAIL; }
        else return BAIL;
    closed:
        for (;;) { /* after a value: a comma (the next member or element), or the containers' ends */
            if (depth == 0) return 0;
            ws(c);
            if (c->p >= c->end) return BAIL;
            ch = *c->p++;
            if (ch == ',') break;
            if (ch == (stack[depth - 1] == '{' ? '}' : ']')) { depth--; continue; }
            return BAIL;
        }
        if (stack[depth - 1] == '[') continue;
    key:
        ws(c);
        if (c->p >= c->end || *c->p != '"' || string(c, &esc)) return BAIL;
        ws(c);
        if (c->p >= c->end || *c->p != ':') return BAIL;
        c->p++;
    }
}

/* A number token as a double, correctly rounded. Fast path (Clinger's): a decimal significand of at most 2^53 (19
 * digits read at most: no overflow) and a decimal exponent within 22 give two exact doubles whose one IEEE division or multiplication is the correctly rounded value;
 * otherwise PyOS_string_to_double (locale-independent, correctly rounded). */
static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

int to_double(const unsigned char *s, const unsigned char *e, double *out) {
    const unsigned char *p = s;
    int neg = 0, digits = 0, exp10 = 0;
    uint64_t m = 0;
    if (p < e && *p == '-') { neg = 1; p++; }
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0') digits++;
        m = m * 10 + (unsigned)(*p - '0');
        if (digits > 19) goto slow;
    }
    if (p < e && *p == '.')
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (m || *p != '0') digits++;
            m = m * 10 + (unsigned)(*p - '0');
            exp10--;
            if (digits > 19) goto slow;
        }
    if (p < e && (*p == 'e' || *p == 'E')) {
        int eneg = 0, ev = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            ev = ev * 10 + (*p - '0');
            if (ev > 400) goto slow;
        }
        exp10 += eneg ? -ev : ev;
    }
    if (p != e || exp10 < -22 || exp10 > 22 || m > (1ULL << 53)) goto slow;
    double v = (double)m; /* (exact: m <= 2^53) */
    v = exp10 < 0 ? v / POW10[-exp10] : v * POW10[exp10];
    *out = neg ? -v : v;
    return 0;
slow:
    return to_double_slow(s, e, out);
}

int to_double_slow(const unsigned char *s, const unsigned char *e, double *out) {
    char tmp[64];
    size_t n = (size_t)(e - s);
    if (n >= sizeof(tmp)) return BAIL;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double v = PyOS_string_to_double(tmp, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return BAIL; }
    *out = v;
    return 0;
}

/* An integer token that fits int64. */
int to_int64(const unsigned char *s, const unsigned char *e, int64_t *out) {
    int neg = 0;
    if (s < e && *s == '-') { neg = 1; s++; }
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return BAIL;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return BAIL;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return BAIL;
        *out = (int64_t)v;
    }
    return 0;
}
