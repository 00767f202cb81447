/* leaseq._native.speedups: the server's per-message loops that cost most in Python, compiled.

   Optional: setup.py builds it when a C compiler is there and installs without it otherwise;
   every function here has a pure-Python twin (the reference) that gives the same bytes, and the
   callers use the twin whenever this module is missing or raises (see native/__init__.py and
   tests/service/test_native_encoding.py, which checks that both give byte-identical results).

   encode_received(messages) -> list[bytes]
       For each DeliveredMessage, the wire bytes of one `messages` entry of a GetMessagesResponse:
       exactly what server/convert.py's ReceivedEncoder.__call__ writes. Anything of an unexpected
       type raises (TypeError, OverflowError, ...): the caller then runs the Python twin, which
       gives its own answer or error. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + extra) cap *= 2;
    char *grown = PyMem_Realloc(b->data, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const char *src, Py_ssize_t n) {
    if (reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static int put_byte(Buf *b, unsigned char c) {
    if (reserve(b, 1) < 0) return -1;
    b->data[b->len++] = (char)c;
    return 0;
}

static int put_varint(Buf *b, uint64_t v) {
    if (reserve(b, 10) < 0) return -1;
    while (v >= 0x80) {
        b->data[b->len++] = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    b->data[b->len++] = (char)v;
    return 0;
}

/* convert._string_field: tag, length, UTF-8 (strict: a lone surrogate raises, as str.encode). */
static int put_string_field(Buf *b, unsigned char tag, PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "expected str");
        return -1;
    }
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (utf8 == NULL) return -1;
    if (put_byte(b, tag) < 0 || put_varint(b, (uint64_t)n) < 0) return -1;
    return put(b, utf8, n);
}

/* convert.seconds_to_timestamp(when).SerializeToString() as a field: tag, length, message.
   seconds_to_timestamp is divmod(round(when * 1e9), 1e9); round() is float.__round__ (halves to
   even), so this repeats CPython's steps. */
static int put_timestamp_field(Buf *b, unsigned char tag, PyObject *when) {
    int64_t total;
    if (PyFloat_Check(when)) {
        double x = PyFloat_AS_DOUBLE(when) * 1e9;
        if (!isfinite(x)) {
            PyErr_SetString(PyExc_OverflowError, "instant out of range");
            return -1;
        }
        double rounded = round(x);
        if (fabs(x - rounded) == 0.5) rounded = 2.0 * round(x / 2.0);
        if (fabs(rounded) >= 9.2e18) {
            PyErr_SetString(PyExc_OverflowError, "instant out of range");
            return -1;
        }
        total = (int64_t)rounded;
    } else if (PyLong_Check(when)) {
        long long seconds = PyLong_AsLongLong(when);
        if (seconds == -1 && PyErr_Occurred()) return -1;
        if (seconds > INT64_MAX / 1000000000 || seconds < INT64_MIN / 1000000000) {
            PyErr_SetString(PyExc_OverflowError, "instant out of range");
            return -1;
        }
        total = (int64_t)seconds * 1000000000;
    } else {
        PyErr_SetString(PyExc_TypeError, "expected float or int");
        return -1;
    }
    int64_t whole = total / 1000000000, nanos = total % 1000000000;
    if (nanos < 0) {  /* floor division, as Python's divmod */
        nanos += 1000000000;
        whole -= 1;
    }
    char inner[24];
    Buf message = {inner, 0, sizeof inner};  /* never grows: at most 1 + 10 + 1 + 5 bytes */
    if (whole != 0) {
        message.data[message.len++] = 0x08;
        uint64_t v = (uint64_t)whole;
        while (v >= 0x80) {
            message.data[message.len++] = (char)((v & 0x7F) | 0x80);
            v >>= 7;
        }
        message.data[message.len++] = (char)v;
    }
    if (nanos != 0) {
        message.data[message.len++] = 0x10;
        uint64_t v = (uint64_t)nanos;
        while (v >= 0x80) {
            message.data[message.len++] = (char)((v & 0x7F) | 0x80);
            v >>= 7;
        }
        message.data[message.len++] = (char)v;
    }
    if (put_byte(b, tag) < 0 || put_varint(b, (uint64_t)message.len) < 0) return -1;
    return put(b, message.data, message.len);
}

static PyObject *name_message_id, *name_receipt, *name_body, *name_attributes, *name_channel,
    *name_enqueued_at, *name_expires_at, *name_visible_at, *name_delivery_count, *name_last_error;

static int encode_one(Buf *b, PyObject *m) {
    PyObject *v = NULL;
    int ok = -1;
#define FIELD(name) \
    do { \
        Py_XDECREF(v); \
        v = PyObject_GetAttr(m, name); \
        if (v == NULL) goto done; \
    } while (0)
    FIELD(name_message_id);
    if (put_string_field(b, 0x0a, v) < 0) goto done;
    FIELD(name_receipt);
    if (put_string_field(b, 0x12, v) < 0) goto done;
    FIELD(name_body);
    if (!PyBytes_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes");
        goto done;
    }
    if (PyBytes_GET_SIZE(v) > 0) {
        if (put_byte(b, 0x1a) < 0 || put_varint(b, (uint64_t)PyBytes_GET_SIZE(v)) < 0) goto done;
        if (put(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0) goto done;
    }
    FIELD(name_attributes);
    if (!PyDict_CheckExact(v)) {
        PyErr_SetString(PyExc_TypeError, "expected dict");
        goto done;
    }
    {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(v, &pos, &key, &value)) {
            Buf entry = {NULL, 0, 0};
            if (put_string_field(&entry, 0x0a, key) < 0 || put_string_field(&entry, 0x12, value) < 0
                || put_byte(b, 0x22) < 0 || put_varint(b, (uint64_t)entry.len) < 0
                || put(b, entry.data, entry.len) < 0) {
                PyMem_Free(entry.data);
                goto done;
            }
            PyMem_Free(entry.data);
        }
    }
    FIELD(name_channel);
    {
        int set = PyObject_IsTrue(v);
        if (set < 0 || (set && put_string_field(b, 0x2a, v) < 0)) goto done;
    }
    FIELD(name_enqueued_at);
    if (put_timestamp_field(b, 0x32, v) < 0) goto done;
    FIELD(name_expires_at);
    if (put_timestamp_field(b, 0x3a, v) < 0) goto done;
    FIELD(name_visible_at);
    if (put_timestamp_field(b, 0x42, v) < 0) goto done;
    FIELD(name_delivery_count);
    {
        if (!PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "expected int");
            goto done;
        }
        long long count = PyLong_AsLongLong(v);
        if (count == -1 && PyErr_Occurred()) goto done;
        if (count < 0) {
            PyErr_SetString(PyExc_ValueError, "negative delivery count");
            goto done;
        }
        if (put_byte(b, 0x48) < 0 || put_varint(b, (uint64_t)count) < 0) goto done;
    }
    FIELD(name_last_error);
    {
        int set = PyObject_IsTrue(v);
        if (set < 0 || (set && put_string_field(b, 0x52, v) < 0)) goto done;
    }
    ok = 0;
done:
    Py_XDECREF(v);
#undef FIELD
    return ok;
}

static PyObject *encode_received(PyObject *self, PyObject *messages) {
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    Buf inner = {NULL, 0, 0};
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        inner.len = 0;
        if (encode_one(&inner, PySequence_Fast_GET_ITEM(seq, i)) < 0) goto fail;
        /* the entry: tag 1 (0x0a), the length, the message */
        char head[11];
        Py_ssize_t head_len = 1;
        head[0] = 0x0a;
        uint64_t v = (uint64_t)inner.len;
        while (v >= 0x80) {
            head[head_len++] = (char)((v & 0x7F) | 0x80);
            v >>= 7;
        }
        head[head_len++] = (char)v;
        PyObject *entry = PyBytes_FromStringAndSize(NULL, head_len + inner.len);
        if (entry == NULL) goto fail;
        memcpy(PyBytes_AS_STRING(entry), head, (size_t)head_len);
        memcpy(PyBytes_AS_STRING(entry) + head_len, inner.data, (size_t)inner.len);
        PyList_SET_ITEM(out, i, entry);
    }
    PyMem_Free(inner.data);
    Py_DECREF(seq);
    return out;
fail:
    PyMem_Free(inner.data);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_received", encode_received, METH_O,
     "encode_received(messages) -> list[bytes]: ReceivedEncoder's bytes for each message."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "speedups", "leaseq's compiled per-message loops (optional).", -1,
    methods,
};

PyMODINIT_FUNC PyInit_speedups(void) {
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(name_message_id, "message_id");
    INTERN(name_receipt, "receipt");
    INTERN(name_body, "body");
    INTERN(name_attributes, "attributes");
    INTERN(name_channel, "channel");
    INTERN(name_enqueued_at, "enqueued_at");
    INTERN(name_expires_at, "expires_at");
    INTERN(name_visible_at, "visible_at");
    INTERN(name_delivery_count, "delivery_count");
    INTERN(name_last_error, "last_error");
#undef INTERN
    return PyModule_Create(&module);
}
