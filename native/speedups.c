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

/* v as a varint at out (room for 10 bytes): how many bytes it took. */
static Py_ssize_t varint_into(char *out, uint64_t v) {
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        out[n++] = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[n++] = (char)v;
    return n;
}

static int put_varint(Buf *b, uint64_t v) {
    if (reserve(b, 10) < 0) return -1;
    b->len += varint_into(b->data + b->len, v);
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
    char message[24];  /* at most 1 + 10 + 1 + 5 bytes */
    Py_ssize_t len = 0;
    if (whole != 0) {
        message[len++] = 0x08;
        len += varint_into(message + len, (uint64_t)whole);
    }
    if (nanos != 0) {
        message[len++] = 0x10;
        len += varint_into(message + len, (uint64_t)nanos);
    }
    if (put_byte(b, tag) < 0 || put_varint(b, (uint64_t)len) < 0) return -1;
    return put(b, message, len);
}

static PyObject *name_message_id, *name_receipt, *name_body, *name_attributes, *name_channel,
    *name_enqueued_at, *name_expires_at, *name_visible_at, *name_delivery_count, *name_last_error,
    *name_group, *name_sequence;

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
    FIELD(name_group);
    {
        int set = PyObject_IsTrue(v);
        if (set < 0 || (set && put_string_field(b, 0x5a, v) < 0)) goto done;
    }
    FIELD(name_sequence);
    {
        if (!PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "expected int");
            goto done;
        }
        long long sequence = PyLong_AsLongLong(v);
        if (sequence == -1 && PyErr_Occurred()) goto done;
        if (sequence < 0) {
            PyErr_SetString(PyExc_ValueError, "negative sequence");
            goto done;
        }
        if (sequence > 0 && (put_byte(b, 0x60) < 0 || put_varint(b, (uint64_t)sequence) < 0))
            goto done;
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
        head[0] = 0x0a;
        Py_ssize_t head_len = 1 + varint_into(head + 1, (uint64_t)inner.len);
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

/* --- receipts: keyed BLAKE2b (RFC 7693) and base64url, as server/receipts.py writes them -------

   encode_receipts(blake_key, queue_uid, pairs) -> list[str]
       ReceiptCodec.encode(queue_uid, key, seq) for each (key, seq) pair: version 2 receipts.
   decode_receipts(blake_key, queue_uid, receipts) -> list[tuple[int, int] | None]
       ReceiptCodec.decode(receipt, queue_uid) for each receipt. A receipt of version 1
       (HMAC-SHA256, older releases) raises NotImplementedError: the caller decodes that batch
       in Python. */

static const uint64_t blake2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64_le(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, sizeof v);  /* one load, where the byte loop below takes eight and shifts */
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
#endif
}

#define G(a, b, c, d, x, y) \
    do { \
        a = a + b + (x); d = rotr64(d ^ a, 32); c = c + d; b = rotr64(b ^ c, 24); \
        a = a + b + (y); d = rotr64(d ^ a, 16); c = c + d; b = rotr64(b ^ c, 63); \
    } while (0)

static void blake2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64_le(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= t;  /* the high word of the counter stays 0: messages here are tiny */
    if (last) v[14] = ~v[14];
    /* The twelve rounds written out, so that every sigma index is a constant and m[] lives in
       registers: the loop over r read sigma and m from memory for every G (a receipt made or
       checked costs one compression; the instruction counts are in docs/performance.md). */
#define ROUND(r) \
    do { \
        G(v[0], v[4], v[8], v[12], m[blake2b_sigma[r][0]], m[blake2b_sigma[r][1]]); \
        G(v[1], v[5], v[9], v[13], m[blake2b_sigma[r][2]], m[blake2b_sigma[r][3]]); \
        G(v[2], v[6], v[10], v[14], m[blake2b_sigma[r][4]], m[blake2b_sigma[r][5]]); \
        G(v[3], v[7], v[11], v[15], m[blake2b_sigma[r][6]], m[blake2b_sigma[r][7]]); \
        G(v[0], v[5], v[10], v[15], m[blake2b_sigma[r][8]], m[blake2b_sigma[r][9]]); \
        G(v[1], v[6], v[11], v[12], m[blake2b_sigma[r][10]], m[blake2b_sigma[r][11]]); \
        G(v[2], v[7], v[8], v[13], m[blake2b_sigma[r][12]], m[blake2b_sigma[r][13]]); \
        G(v[3], v[4], v[9], v[14], m[blake2b_sigma[r][14]], m[blake2b_sigma[r][15]]); \
    } while (0)
    ROUND(0); ROUND(1); ROUND(2); ROUND(3); ROUND(4); ROUND(5);
    ROUND(6); ROUND(7); ROUND(8); ROUND(9); ROUND(10); ROUND(11);
#undef ROUND
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

#define MAC_BYTES 16
#define BODY_BYTES 13  /* version (1) | key (8) | receipt_seq (4) */
#define RAW_BYTES (BODY_BYTES + MAC_BYTES)
#define TEXT_CHARS 39

/* The state after the key block: each MAC then costs one compression (the message block). */
static int keyed_state(PyObject *key, uint64_t state[8]) {
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) < 1 || PyBytes_GET_SIZE(key) > 64) {
        PyErr_SetString(PyExc_ValueError, "the BLAKE2b key must be 1 to 64 bytes");
        return -1;
    }
    Py_ssize_t keylen = PyBytes_GET_SIZE(key);
    uint8_t block[128] = {0};
    memcpy(block, PyBytes_AS_STRING(key), (size_t)keylen);
    for (int i = 0; i < 8; i++) state[i] = blake2b_iv[i];
    state[0] ^= 0x01010000ULL ^ ((uint64_t)keylen << 8) ^ MAC_BYTES;
    blake2b_compress(state, block, 128, 0);
    return 0;
}

/* MAC of body (13 bytes) + uid (8 bytes, big-endian) under the keyed state. */
static void receipt_mac(const uint64_t keyed[8], const uint8_t body[BODY_BYTES],
                        const uint8_t uid[8], uint8_t out[MAC_BYTES]) {
    uint64_t h[8];
    uint8_t block[128] = {0};
    memcpy(h, keyed, sizeof h);
    memcpy(block, body, BODY_BYTES);
    memcpy(block + BODY_BYTES, uid, 8);
    blake2b_compress(h, block, 128 + BODY_BYTES + 8, 1);
    for (int i = 0; i < MAC_BYTES; i++) out[i] = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
}

static void put_be(uint8_t *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static int uid_bytes(PyObject *queue_uid, uint8_t uid[8]) {
    unsigned long long v = PyLong_AsUnsignedLongLong(queue_uid);  /* struct ">Q" refuses the same */
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    put_be(uid, v, 8);
    return 0;
}

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* One receipt of a batch: a new reference, or NULL with an exception. */
typedef PyObject *(*ReceiptStep)(PyObject *item, const uint64_t keyed[8], const uint8_t uid[8]);

/* (blake_key, queue_uid, items) -> [step(item) for item in items]: what encode_receipts and
   decode_receipts share. */
static PyObject *receipt_batch(PyObject *args, ReceiptStep step) {
    PyObject *key, *queue_uid, *items;
    if (!PyArg_ParseTuple(args, "OOO", &key, &queue_uid, &items)) return NULL;
    uint64_t keyed[8];
    uint8_t uid[8];
    if (keyed_state(key, keyed) < 0 || uid_bytes(queue_uid, uid) < 0) return NULL;
    PyObject *seq = PySequence_Fast(items, "expected a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = step(PySequence_Fast_GET_ITEM(seq, i), keyed, uid);
        if (item == NULL) goto fail;
        PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *encode_step(PyObject *pair, const uint64_t keyed[8], const uint8_t uid[8]) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "expected (key, receipt_seq) tuples");
        return NULL;
    }
    unsigned long long message_key = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 0));
    if (message_key == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    unsigned long long receipt_seq = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 1));
    if (receipt_seq == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (receipt_seq > 0xFFFFFFFFULL) {
        PyErr_SetString(PyExc_OverflowError, "receipt_seq out of range");
        return NULL;
    }
    uint8_t raw[RAW_BYTES + 1];
    raw[0] = 2;
    put_be(raw + 1, message_key, 8);
    put_be(raw + 9, receipt_seq, 4);
    receipt_mac(keyed, raw, uid, raw + BODY_BYTES);
    raw[RAW_BYTES] = 0;  /* the pad byte: 30 bytes = 40 characters, the last one dropped */
    char text[40];
    for (int g = 0; g < 10; g++) {
        uint32_t v = ((uint32_t)raw[3 * g] << 16) | ((uint32_t)raw[3 * g + 1] << 8) | raw[3 * g + 2];
        text[4 * g] = b64url[(v >> 18) & 63];
        text[4 * g + 1] = b64url[(v >> 12) & 63];
        text[4 * g + 2] = b64url[(v >> 6) & 63];
        text[4 * g + 3] = b64url[v & 63];
    }
    return PyUnicode_FromStringAndSize(text, TEXT_CHARS);
}

static PyObject *encode_receipts(PyObject *self, PyObject *args) {
    return receipt_batch(args, encode_step);
}

static int b64url_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
}

/* decode() of one receipt: 1 with (key, seq) set, 0 when it is not a valid receipt of this
   queue, -1 with an exception (version 1: NotImplementedError). */
static int decode_one(PyObject *receipt, const uint64_t keyed[8], const uint8_t uid[8],
                      unsigned long long *message_key, unsigned long *receipt_seq) {
    if (!PyUnicode_Check(receipt) || PyUnicode_GET_LENGTH(receipt) != TEXT_CHARS
        || !PyUnicode_IS_ASCII(receipt))
        return 0;
    const unsigned char *text = PyUnicode_1BYTE_DATA(receipt);
    uint8_t raw[RAW_BYTES + 2];
    for (int g = 0; g < 10; g++) {
        int values[4];
        for (int j = 0; j < 4; j++) {
            int index = 4 * g + j;
            values[j] = index < TEXT_CHARS ? b64url_value(text[index]) : 0;
            if (values[j] < 0) return 0;
        }
        uint32_t v = ((uint32_t)values[0] << 18) | ((uint32_t)values[1] << 12)
                     | ((uint32_t)values[2] << 6) | (uint32_t)values[3];
        raw[3 * g] = (uint8_t)(v >> 16);
        if (3 * g + 1 < RAW_BYTES + 2) raw[3 * g + 1] = (uint8_t)(v >> 8);
        if (3 * g + 2 < RAW_BYTES + 2) raw[3 * g + 2] = (uint8_t)v;
    }
    /* Base64 leaves 2 spare low bits in the last character: only 0 is a receipt issued. */
    if (b64url_value(text[TEXT_CHARS - 1]) & 3) return 0;
    int version = raw[0];
    if (version == 1) {
        PyErr_SetString(PyExc_NotImplementedError, "version 1 receipt");
        return -1;
    }
    if (version != 2) return 0;
    uint8_t expected[MAC_BYTES];
    receipt_mac(keyed, raw, uid, expected);
    uint8_t diff = 0;  /* constant time, as hmac.compare_digest */
    for (int i = 0; i < MAC_BYTES; i++) diff |= (uint8_t)(expected[i] ^ raw[BODY_BYTES + i]);
    if (diff) return 0;
    unsigned long long k = 0;
    for (int i = 1; i < 9; i++) k = (k << 8) | raw[i];
    unsigned long sq = 0;
    for (int i = 9; i < 13; i++) sq = (sq << 8) | raw[i];
    *message_key = k;
    *receipt_seq = sq;
    return 1;
}

static PyObject *decode_step(PyObject *receipt, const uint64_t keyed[8], const uint8_t uid[8]) {
    unsigned long long message_key;
    unsigned long receipt_seq;
    int found = decode_one(receipt, keyed, uid, &message_key, &receipt_seq);
    if (found < 0) return NULL;
    if (!found) return Py_NewRef(Py_None);
    return Py_BuildValue("(Kk)", message_key, receipt_seq);
}

static PyObject *decode_receipts(PyObject *self, PyObject *args) {
    return receipt_batch(args, decode_step);
}

/* --- sends: the entries of a SendMessagesRequest that are only an id and a body -------------

   plain_entries(data) -> (ids, bodies) | None
       data: a serialized SendMessagesRequest. When every entry sets no field but id (1) and
       body (2), their values, in order (a field given twice: the last one, as protobuf reads
       it); None when any entry sets another field, or the bytes do not parse. Python's twin is
       convert.plain_entries_python.
   plain_entries(data, True) -> (ids, bodies, dedup_ids) | None
       The same, dedup_id (7) allowed too: dedup_ids is None when no entry sets one, else one
       text per entry ("" where unset). */

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return -1;
        uint8_t byte = *(*p)++;
        if (shift == 63 && byte > 1) return -1;  /* beyond 64 bits: protobuf refuses it */
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Skip one field's value of wire type `type`; -1 when malformed. */
static int skip_value(const uint8_t **p, const uint8_t *end, int type) {
    uint64_t n;
    switch (type) {
    case 0: return read_varint(p, end, &n);
    case 1: if (end - *p < 8) return -1; *p += 8; return 0;
    case 5: if (end - *p < 4) return -1; *p += 4; return 0;
    case 2:
        if (read_varint(p, end, &n) < 0 || n > (uint64_t)(end - *p)) return -1;
        *p += n;
        return 0;
    default: return -1;  /* groups (3, 4) never appear in these messages */
    }
}

/* One entry's length-delimited fields 1 (id), 2 (body) and, when `dedup` is not NULL, 7
   (dedup_id): borrowed pointers into the buffer (NULL, 0 when unset). */
typedef struct {
    const uint8_t *at[3];
    uint64_t len[3];
} EntryFields;

/* 1: plain (only those fields set); 0: not plain; -1 malformed. */
static int scan_entry(const uint8_t *p, const uint8_t *end, EntryFields *f, int with_dedup) {
    memset(f, 0, sizeof *f);
    while (p < end) {
        uint64_t tag, n;
        if (read_varint(&p, end, &tag) < 0) return -1;
        uint64_t field = tag >> 3;
        int type = (int)(tag & 7);
        int slot = field == 1 ? 0 : field == 2 ? 1 : (field == 7 && with_dedup) ? 2 : -1;
        if (slot < 0 || type != 2) return 0;
        if (read_varint(&p, end, &n) < 0 || n > (uint64_t)(end - p)) return -1;
        f->at[slot] = p;
        f->len[slot] = n;
        p += n;
    }
    return 1;
}

/* A text field's value as str (the shared empty string when empty); NULL with an error set. */
static PyObject *text_value(const uint8_t *at, uint64_t len, PyObject **empty) {
    if (len == 0) {
        if (*empty == NULL && (*empty = PyUnicode_FromStringAndSize("", 0)) == NULL) return NULL;
        return Py_NewRef(*empty);
    }
    return PyUnicode_DecodeUTF8((const char *)at, (Py_ssize_t)len, "strict");
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

static PyObject *plain_entries(PyObject *self, PyObject *args) {
    PyObject *data;
    int with_dedup = 0;
    if (!PyArg_ParseTuple(args, "O!|p", &PyBytes_Type, &data, &with_dedup)) return NULL;
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(data);
    const uint8_t *end = p + PyBytes_GET_SIZE(data);
    PyObject *ids = PyList_New(0), *bodies = PyList_New(0), *dedup_ids = PyList_New(0);
    PyObject *empty = NULL;
    int any_dedup = 0;
    if (ids == NULL || bodies == NULL || dedup_ids == NULL) goto fail;
    while (p < end) {
        uint64_t tag, n;
        if (read_varint(&p, end, &tag) < 0) goto not_plain;
        uint64_t field = tag >> 3;
        int type = (int)(tag & 7);
        if (field == 0 || field > 0x1FFFFFFF || tag > 0xFFFFFFFF) goto not_plain;  /* invalid */
        if (field == 2 && type == 2) {
            if (read_varint(&p, end, &n) < 0 || n > (uint64_t)(end - p)) goto not_plain;
            EntryFields f;
            if (scan_entry(p, p + n, &f, with_dedup) <= 0) goto not_plain;
            p += n;
            if (append_new(ids, text_value(f.at[0], f.len[0], &empty)) < 0) goto fail;
            if (append_new(bodies, PyBytes_FromStringAndSize((const char *)f.at[1],
                                                             (Py_ssize_t)f.len[1])) < 0)
                goto fail;
            if (with_dedup) {
                any_dedup |= f.len[2] > 0;
                if (append_new(dedup_ids, text_value(f.at[2], f.len[2], &empty)) < 0) goto fail;
            }
        } else if (skip_value(&p, end, type) < 0) {
            goto not_plain;
        }
    }
    Py_XDECREF(empty);
    if (!with_dedup) {
        Py_DECREF(dedup_ids);
        return Py_BuildValue("(NN)", ids, bodies);
    }
    if (!any_dedup) {
        Py_DECREF(dedup_ids);
        return Py_BuildValue("(NNO)", ids, bodies, Py_None);
    }
    return Py_BuildValue("(NNN)", ids, bodies, dedup_ids);
not_plain:
    Py_XDECREF(empty);
    Py_DECREF(ids);
    Py_DECREF(bodies);
    Py_DECREF(dedup_ids);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(empty);
    Py_XDECREF(ids);
    Py_XDECREF(bodies);
    Py_XDECREF(dedup_ids);
    return NULL;
}

/* send_results(ids, message_ids) -> bytes: a SendMessagesResponse's `results`, one SendResult
   (id when not empty, message_id) per pair, as convert.send_results_response writes them. */
static PyObject *send_results(PyObject *self, PyObject *args) {
    PyObject *ids, *message_ids;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &ids, &PyList_Type, &message_ids)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (PyList_GET_SIZE(message_ids) != n) {
        PyErr_SetString(PyExc_ValueError, "ids and message_ids differ in length");
        return NULL;
    }
    Buf out = {NULL, 0, 0}, entry = {NULL, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = PyList_GET_ITEM(ids, i);
        entry.len = 0;
        int set = PyObject_IsTrue(id);
        if (set < 0 || (set && put_string_field(&entry, 0x0a, id) < 0)) goto fail;
        if (put_string_field(&entry, 0x12, PyList_GET_ITEM(message_ids, i)) < 0) goto fail;
        if (put_byte(&out, 0x0a) < 0 || put_varint(&out, (uint64_t)entry.len) < 0
            || put(&out, entry.data, entry.len) < 0)
            goto fail;
    }
    PyObject *result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    PyMem_Free(out.data);
    PyMem_Free(entry.data);
    return result;
fail:
    PyMem_Free(out.data);
    PyMem_Free(entry.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_received", encode_received, METH_O,
     "encode_received(messages) -> list[bytes]: ReceivedEncoder's bytes for each message."},
    {"encode_receipts", encode_receipts, METH_VARARGS,
     "encode_receipts(blake_key, queue_uid, pairs) -> list[str]: ReceiptCodec.encode of each."},
    {"decode_receipts", decode_receipts, METH_VARARGS,
     "decode_receipts(blake_key, queue_uid, receipts) -> list: ReceiptCodec.decode of each."},
    {"plain_entries", plain_entries, METH_VARARGS,
     "plain_entries(data, with_dedup=False) -> (ids, bodies[, dedup_ids]) | None: a"
     " SendMessagesRequest's id/body(/dedup_id)-only entries."},
    {"send_results", send_results, METH_VARARGS,
     "send_results(ids, message_ids) -> bytes: SendMessagesResponse results, as wire bytes."},
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
    INTERN(name_group, "group");
    INTERN(name_sequence, "sequence");
#undef INTERN
    return PyModule_Create(&module);
}
