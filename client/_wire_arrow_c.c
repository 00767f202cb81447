/* Protobuf wire bytes <-> Arrow buffers for the Arrow bulk path, without a Python object per
 * message (leaseq.client._wire_arrow is the Python side and holds the pure-Python fallback that
 * this module must match byte for byte; tests/client/test_wire_arrow.py checks both).
 *
 * decode(raw, top_field, spec) reads a response whose field `top_field` repeats a message, e.g.
 * GetMessagesResponse.messages, and returns (rows, columns): one entry per character of `spec`,
 * which names the kind of the inner message's field 1, 2, 3, ...:
 *   'S' string/bytes, last value wins   -> (offsets int32[rows+1], data)
 *   'V' varint as int32                 -> (values int32[rows],)
 *   'T' google.protobuf.Timestamp       -> (microseconds int64[rows],)  floor of nanos/1000
 *   'M' map<string, string>             -> (entry offsets int32[rows+1], key offsets, key data,
 *                                           value offsets, value data); per row sorted by key,
 *                                           a repeated key keeps its last value
 *   'E' message {int32 1; string 2}     -> (present uint8[rows], code int32[rows], offsets, data)
 *   '-' ignored                         -> ()
 * Fields not in the spec, of another wire type than their kind, or unknown are skipped, as
 * protobuf parsers do. Malformed input raises ValueError.
 *
 * encode(queue, top_field, wrap, position_field, start, stop, columns) writes a request: field 1
 * the queue (left out when empty), then field `top_field` once per row start..stop-1. With wrap,
 * each row is a message of the columns' fields, (field number, offsets buffer, data buffer,
 * array offset) in field-number order, empty values left out (proto3), and when position_field
 * is not 0 that field carries the row's position in the request in decimal ("0", "1", ...).
 * Without wrap, the single column's value is the repeated string itself.
 *
 * All numbers are little-endian, as Arrow's; the module refuses to load elsewhere. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 16

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static int buf_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static int buf_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

/* Append data and the new end offset (the offsets buffer starts with a 0). */
static int buf_string(Buf *offsets, Buf *data, const uint8_t *p, Py_ssize_t n) {
    if (buf_put(data, p, n) < 0) return -1;
    if (data->len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a column passes 2 GiB");
        return -1;
    }
    return buf_i32(offsets, (int32_t)data->len);
}

static PyObject *buf_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len); }

/* --- reading ------------------------------------------------------------------------------ */

static int malformed(const char *what) {
    PyErr_Format(PyExc_ValueError, "malformed protobuf message: %s", what);
    return -1;
}

static int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && p < end; shift += 7) {
        uint8_t c = *p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return malformed("bad varint");
}

static int read_bytes(const uint8_t **pp, const uint8_t *end, const uint8_t **data, Py_ssize_t *n) {
    uint64_t len;
    if (read_varint(pp, end, &len) < 0) return -1;
    if (len > (uint64_t)(end - *pp)) return malformed("length past the end");
    *data = *pp;
    *n = (Py_ssize_t)len;
    *pp += len;
    return 0;
}

static int skip_field(const uint8_t **pp, const uint8_t *end, int wire_type) {
    uint64_t v;
    const uint8_t *d;
    Py_ssize_t n;
    switch (wire_type) {
    case 0:
        return read_varint(pp, end, &v);
    case 1:
        if (end - *pp < 8) return malformed("fixed64 past the end");
        *pp += 8;
        return 0;
    case 2:
        return read_bytes(pp, end, &d, &n);
    case 5:
        if (end - *pp < 4) return malformed("fixed32 past the end");
        *pp += 4;
        return 0;
    default:
        return malformed("unsupported wire type");
    }
}

/* One field of a (sub)message: its number, wire type, and where its value starts. */
static int read_tag(const uint8_t **pp, const uint8_t *end, uint64_t *field, int *wire_type) {
    uint64_t tag;
    if (read_varint(pp, end, &tag) < 0) return -1;
    *field = tag >> 3;
    *wire_type = (int)(tag & 7);
    if (*field == 0) return malformed("field number 0");
    return 0;
}

typedef struct {
    const uint8_t *key, *value;
    Py_ssize_t key_len, value_len;
} Pair;

/* The value of a field being read for the current row. */
typedef struct {
    const uint8_t *s; /* 'S', and 'E''s message */
    Py_ssize_t s_len;
    int64_t seconds;  /* 'T' */
    int32_t nanos;    /* 'T' */
    int32_t v;        /* 'V', and 'E''s code */
    int present;      /* 'E' */
} Slot;

typedef struct {
    Buf b[5];
} Out;

static int slot_message(char kind, Slot *slot, const uint8_t *p, const uint8_t *end) {
    /* A Timestamp or an EntryError: field 1 a varint, field 2 a varint (Timestamp) or a
     * string (EntryError). A repeated occurrence merges into the earlier one, as protobuf does. */
    while (p < end) {
        uint64_t field, v;
        int wt;
        if (read_tag(&p, end, &field, &wt) < 0) return -1;
        if (field == 1 && wt == 0) {
            if (read_varint(&p, end, &v) < 0) return -1;
            if (kind == 'T') slot->seconds = (int64_t)v;
            else slot->v = (int32_t)(uint32_t)v;
        } else if (field == 2 && wt == 0 && kind == 'T') {
            if (read_varint(&p, end, &v) < 0) return -1;
            slot->nanos = (int32_t)(uint32_t)v;
        } else if (field == 2 && wt == 2 && kind == 'E') {
            if (read_bytes(&p, end, &slot->s, &slot->s_len) < 0) return -1;
        } else if (skip_field(&p, end, wt) < 0) {
            return -1;
        }
    }
    return 0;
}

static int read_pair(const uint8_t *p, const uint8_t *end, Pair *pair) {
    static const uint8_t empty[1] = {0};
    pair->key = pair->value = empty;
    pair->key_len = pair->value_len = 0;
    while (p < end) {
        uint64_t field;
        int wt;
        if (read_tag(&p, end, &field, &wt) < 0) return -1;
        if (field == 1 && wt == 2) {
            if (read_bytes(&p, end, &pair->key, &pair->key_len) < 0) return -1;
        } else if (field == 2 && wt == 2) {
            if (read_bytes(&p, end, &pair->value, &pair->value_len) < 0) return -1;
        } else if (skip_field(&p, end, wt) < 0) {
            return -1;
        }
    }
    return 0;
}

static int key_cmp(const Pair *a, const Pair *b) {
    Py_ssize_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = n ? memcmp(a->key, b->key, (size_t)n) : 0;
    if (c) return c;
    return (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

/* Sort by key, stable (insertion sort: maps are small), and keep the last of equal keys. */
static Py_ssize_t sort_pairs(Pair *pairs, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) {
        Pair x = pairs[i];
        Py_ssize_t j = i;
        while (j > 0 && key_cmp(&pairs[j - 1], &x) > 0) {
            pairs[j] = pairs[j - 1];
            j--;
        }
        pairs[j] = x;
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 1 < n && key_cmp(&pairs[i], &pairs[i + 1]) == 0) continue;
        pairs[kept++] = pairs[i];
    }
    return kept;
}

static int64_t micros(const Slot *s) {
    int64_t n = s->nanos;
    int64_t floor_us = n >= 0 ? n / 1000 : -((-n + 999) / 1000);
    return s->seconds * 1000000 + floor_us;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer raw;
    int top_field;
    const char *spec;
    Py_ssize_t nspec;
    if (!PyArg_ParseTuple(args, "y*is#", &raw, &top_field, &spec, &nspec)) return NULL;
    PyObject *result = NULL;
    Out out[MAX_FIELDS];
    Slot slots[MAX_FIELDS];
    Pair *pairs = NULL;
    Py_ssize_t npairs = 0, cap_pairs = 0, rows = 0;
    memset(out, 0, sizeof out);
    if (nspec > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "spec too long");
        goto done;
    }
    for (Py_ssize_t f = 0; f < nspec; f++) {
        char k = spec[f];
        /* Offsets buffers start with 0. */
        if ((k == 'S' && buf_i32(&out[f].b[0], 0) < 0) ||
            (k == 'M' && (buf_i32(&out[f].b[0], 0) < 0 || buf_i32(&out[f].b[1], 0) < 0 ||
                          buf_i32(&out[f].b[3], 0) < 0)) ||
            (k == 'E' && buf_i32(&out[f].b[2], 0) < 0))
            goto done;
    }
    const uint8_t *p = raw.buf, *end = p + raw.len;
    while (p < end) {
        uint64_t field;
        int wt;
        const uint8_t *msg, *mend;
        Py_ssize_t mlen;
        if (read_tag(&p, end, &field, &wt) < 0) goto done;
        if (field != (uint64_t)top_field || wt != 2) {
            if (skip_field(&p, end, wt) < 0) goto done;
            continue;
        }
        if (read_bytes(&p, end, &msg, &mlen) < 0) goto done;
        mend = msg + mlen;
        memset(slots, 0, sizeof slots);
        npairs = 0;
        while (msg < mend) {
            if (read_tag(&msg, mend, &field, &wt) < 0) goto done;
            char kind = field <= (uint64_t)nspec ? spec[field - 1] : '-';
            Slot *slot = &slots[field <= (uint64_t)nspec ? field - 1 : 0];
            uint64_t v;
            const uint8_t *d;
            Py_ssize_t n;
            if (kind == 'S' && wt == 2) {
                if (read_bytes(&msg, mend, &slot->s, &slot->s_len) < 0) goto done;
            } else if (kind == 'V' && wt == 0) {
                if (read_varint(&msg, mend, &v) < 0) goto done;
                slot->v = (int32_t)(uint32_t)v;
            } else if ((kind == 'T' || kind == 'E') && wt == 2) {
                if (read_bytes(&msg, mend, &d, &n) < 0) goto done;
                if (slot_message(kind, slot, d, d + n) < 0) goto done;
                slot->present = 1;
            } else if (kind == 'M' && wt == 2) {
                if (read_bytes(&msg, mend, &d, &n) < 0) goto done;
                if (npairs == cap_pairs) {
                    cap_pairs = cap_pairs ? cap_pairs * 2 : 16;
                    Pair *grown = realloc(pairs, (size_t)cap_pairs * sizeof(Pair));
                    if (grown == NULL) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    pairs = grown;
                }
                if (read_pair(d, d + n, &pairs[npairs]) < 0) goto done;
                npairs++;
            } else if (skip_field(&msg, mend, wt) < 0) {
                goto done;
            }
        }
        for (Py_ssize_t f = 0; f < nspec; f++) {
            Slot *s = &slots[f];
            Buf *b = out[f].b;
            switch (spec[f]) {
            case 'S':
                if (buf_string(&b[0], &b[1], s->s, s->s_len) < 0) goto done;
                break;
            case 'V':
                if (buf_i32(&b[0], s->v) < 0) goto done;
                break;
            case 'T':
                if (buf_i64(&b[0], micros(s)) < 0) goto done;
                break;
            case 'E':
                if (buf_u8(&b[0], (uint8_t)s->present) < 0 || buf_i32(&b[1], s->v) < 0 ||
                    buf_string(&b[2], &b[3], s->s, s->s_len) < 0)
                    goto done;
                break;
            case 'M': {
                /* One map per spec: the pairs gathered above belong to it. */
                Py_ssize_t kept = sort_pairs(pairs, npairs);
                for (Py_ssize_t i = 0; i < kept; i++) {
                    if (buf_string(&b[1], &b[2], pairs[i].key, pairs[i].key_len) < 0 ||
                        buf_string(&b[3], &b[4], pairs[i].value, pairs[i].value_len) < 0)
                        goto done;
                }
                if (buf_i32(&b[0], (int32_t)((b[1].len / 4) - 1)) < 0) goto done;
                break;
            }
            default:
                break;
            }
        }
        rows++;
    }
    result = PyTuple_New(nspec);
    if (result == NULL) goto done;
    for (Py_ssize_t f = 0; f < nspec; f++) {
        int count = 0;
        switch (spec[f]) {
        case 'S': count = 2; break;
        case 'V': case 'T': count = 1; break;
        case 'E': count = 4; break;
        case 'M': count = 5; break;
        default: count = 0;
        }
        PyObject *t = PyTuple_New(count);
        if (t == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, f, t);
        for (int i = 0; i < count; i++) {
            PyObject *bytes = buf_bytes(&out[f].b[i]);
            if (bytes == NULL) {
                Py_CLEAR(result);
                goto done;
            }
            PyTuple_SET_ITEM(t, i, bytes);
        }
    }
    {
        PyObject *pair = Py_BuildValue("(nN)", rows, result);
        result = pair;
    }
done:
    for (Py_ssize_t f = 0; f < MAX_FIELDS; f++)
        for (int i = 0; i < 5; i++) free(out[f].b[i].p);
    free(pairs);
    PyBuffer_Release(&raw);
    return result;
}

/* --- writing ------------------------------------------------------------------------------ */

static Py_ssize_t varint_size(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

typedef struct {
    int field;
    Py_buffer offsets, data;
    Py_ssize_t offset;
    int held;
} Column;

static Py_ssize_t decimal_size(Py_ssize_t v) {
    Py_ssize_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static Py_ssize_t entry_size(Column *cols, Py_ssize_t ncols, int position_field, Py_ssize_t row,
                             Py_ssize_t position) {
    Py_ssize_t size = 0;
    int position_done = position_field == 0;
    for (Py_ssize_t c = 0; c <= ncols; c++) {
        if (!position_done && (c == ncols || cols[c].field > position_field)) {
            Py_ssize_t n = decimal_size(position);
            size += varint_size((uint64_t)position_field << 3) + varint_size((uint64_t)n) + n;
            position_done = 1;
        }
        if (c == ncols) break;
        const int32_t *off = (const int32_t *)cols[c].offsets.buf + cols[c].offset;
        Py_ssize_t n = off[row + 1] - off[row];
        if (n) size += varint_size((uint64_t)cols[c].field << 3) + varint_size((uint64_t)n) + n;
    }
    return size;
}

static uint8_t *put_string(uint8_t *p, int field, const void *data, Py_ssize_t n) {
    p = put_varint(p, ((uint64_t)field << 3) | 2);
    p = put_varint(p, (uint64_t)n);
    memcpy(p, data, (size_t)n);
    return p + n;
}

static uint8_t *put_entry(uint8_t *p, Column *cols, Py_ssize_t ncols, int position_field,
                          Py_ssize_t row, Py_ssize_t position) {
    int position_done = position_field == 0;
    for (Py_ssize_t c = 0; c <= ncols; c++) {
        if (!position_done && (c == ncols || cols[c].field > position_field)) {
            char digits[24];
            int n = snprintf(digits, sizeof digits, "%zd", position);
            p = put_string(p, position_field, digits, n);
            position_done = 1;
        }
        if (c == ncols) break;
        const int32_t *off = (const int32_t *)cols[c].offsets.buf + cols[c].offset;
        Py_ssize_t n = off[row + 1] - off[row];
        if (n) p = put_string(p, cols[c].field, (const char *)cols[c].data.buf + off[row], n);
    }
    return p;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    Py_buffer queue;
    int top_field, wrap, position_field;
    Py_ssize_t start, stop;
    PyObject *columns;
    if (!PyArg_ParseTuple(args, "y*iiinnO!", &queue, &top_field, &wrap, &position_field, &start,
                          &stop, &PyTuple_Type, &columns))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(columns);
    Column cols[MAX_FIELDS];
    memset(cols, 0, sizeof cols);
    if (ncols > MAX_FIELDS || (!wrap && (ncols != 1 || position_field))) {
        PyErr_SetString(PyExc_ValueError, "bad columns");
        goto done;
    }
    for (Py_ssize_t c = 0; c < ncols; c++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(columns, c), "iy*y*n", &cols[c].field,
                              &cols[c].offsets, &cols[c].data, &cols[c].offset)) {
            goto done;
        }
        cols[c].held = 1;
        if (c && cols[c].field <= cols[c - 1].field) {
            PyErr_SetString(PyExc_ValueError, "columns must be in field-number order");
            goto done;
        }
        /* Every offset the rows use must lie in the buffers. */
        Py_ssize_t count = cols[c].offsets.len / 4;
        if (start < 0 || stop < start || cols[c].offset < 0 || cols[c].offset + stop + 1 > count) {
            PyErr_SetString(PyExc_ValueError, "rows out of the offsets buffer");
            goto done;
        }
        const int32_t *off = (const int32_t *)cols[c].offsets.buf + cols[c].offset;
        for (Py_ssize_t r = start; r < stop; r++) {
            if (off[r] < 0 || off[r + 1] < off[r] || off[r + 1] > cols[c].data.len) {
                PyErr_SetString(PyExc_ValueError, "offsets out of the data buffer");
                goto done;
            }
        }
    }
    Py_ssize_t total = queue.len ? 1 + varint_size((uint64_t)queue.len) + queue.len : 0;
    Py_ssize_t tag = varint_size(((uint64_t)top_field << 3) | 2);
    for (Py_ssize_t r = start; r < stop; r++) {
        Py_ssize_t n;
        if (wrap) {
            n = entry_size(cols, ncols, position_field, r, r - start);
        } else {
            const int32_t *off = (const int32_t *)cols[0].offsets.buf + cols[0].offset;
            n = off[r + 1] - off[r];
        }
        total += tag + varint_size((uint64_t)n) + n;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(result);
    if (queue.len) p = put_string(p, 1, queue.buf, queue.len);
    for (Py_ssize_t r = start; r < stop; r++) {
        if (wrap) {
            Py_ssize_t n = entry_size(cols, ncols, position_field, r, r - start);
            p = put_varint(p, ((uint64_t)top_field << 3) | 2);
            p = put_varint(p, (uint64_t)n);
            p = put_entry(p, cols, ncols, position_field, r, r - start);
        } else {
            const int32_t *off = (const int32_t *)cols[0].offsets.buf + cols[0].offset;
            p = put_string(p, top_field, (const char *)cols[0].data.buf + off[r], off[r + 1] - off[r]);
        }
    }
done:
    for (Py_ssize_t c = 0; c < ncols && c < MAX_FIELDS; c++) {
        if (cols[c].held) {
            PyBuffer_Release(&cols[c].offsets);
            PyBuffer_Release(&cols[c].data);
        }
    }
    PyBuffer_Release(&queue);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Columns of a response's repeated message (see the file)."},
    {"encode", encode, METH_VARARGS, "A request's wire bytes from Arrow buffers (see the file)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire_arrow_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wire_arrow_c(void) {
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "_wire_arrow_c needs a little-endian machine");
        return NULL;
    }
    return PyModule_Create(&module);
}
