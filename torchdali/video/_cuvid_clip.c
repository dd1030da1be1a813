/* One clip through NVDEC's parser without the Python interpreter: the packet loop, the re-framing to
 * Annex-B, and the parser's decode and display callbacks (``_cuvid.Session``; its module docstring says
 * what each step does and why). Python keeps the sequence callback (once per sequence header: it makes and
 * keeps the decoders) and everything around the clip.
 *
 * Each packet's timestamp is its rank among the clip's pts (``stamps[j]``): the parser's timestamps are
 * presentation times, handed out in display order (fed the packets' indices in decode order, the pictures
 * of H.264 streams with B-frames came back under other pictures' numbers), and a rank, in display order
 * like the pts, leads back to its packet (``by_stamp``), whose picture goes to
 * ``out_offsets[out_start[j]:out_start[j + 1]]``.
 *
 * The driver's entry points come in ``td_api`` (filled by ``_cuvid`` from libnvcuvid and libcuda, or by a
 * stand-in driver in the tests), so this file needs no NVIDIA header and links against nothing. The
 * structures below are those of nvcuvid.h, cuviddec.h and cuda.h on 64-bit Linux, checked by the static
 * asserts (the same layouts ``_cuvid``'s ctypes structures have, which its tests check).
 *
 * Built on first use by ``torchdali._native`` with the system C compiler; loaded with ctypes, which lets go
 * of the interpreter for the whole ``td_decode`` call.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {                 /* CUVIDSOURCEDATAPACKET */
    unsigned long flags;
    unsigned long payload_size;
    const unsigned char *payload;
    long long timestamp;
} td_packet;

typedef struct {                 /* CUVIDPARSERDISPINFO */
    int picture_index, progressive_frame, top_field_first, repeat_first_field;
    long long timestamp;
} td_display_info;

typedef struct {                 /* CUVIDPROCPARAMS */
    int progressive_frame, second_field, top_field_first, unpaired_field;
    unsigned int reserved_flags, reserved_zero;
    unsigned long long raw_input_dptr;
    unsigned int raw_input_pitch, raw_input_format;
    unsigned long long raw_output_dptr;
    unsigned int raw_output_pitch, Reserved1;
    void *output_stream;
    unsigned int Reserved[46];
    void *histogram_dptr;
    void *Reserved2[1];
} td_proc_params;

typedef struct {                 /* CUDA_MEMCPY2D */
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    unsigned long long srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    unsigned long long dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} td_memcpy2d;

_Static_assert(sizeof(td_packet) == 32, "CUVIDSOURCEDATAPACKET");
_Static_assert(sizeof(td_display_info) == 24, "CUVIDPARSERDISPINFO");
_Static_assert(sizeof(td_proc_params) == 264 && offsetof(td_proc_params, output_stream) == 56, "CUVIDPROCPARAMS");
_Static_assert(sizeof(td_memcpy2d) == 128, "CUDA_MEMCPY2D");

enum { PKT_ENDOFSTREAM = 0x01, CU_MEMORYTYPE_DEVICE = 2 };
enum { PIC_CURR_IDX = 8, PIC_REF_FLAG = 56 };  /* byte offsets of CurrPicIdx and ref_pic_flag in CUVIDPICPARAMS */
enum { MAX_SURFACES = 64, MAX_MAPPED = 8 };

typedef struct {
    int (*parse)(void *parser, td_packet *packet);                          /* cuvidParseVideoData */
    int (*decode_picture)(void *decoder, void *picture);                    /* cuvidDecodePicture */
    int (*map)(void *decoder, int index, unsigned long long *ptr, unsigned int *pitch,
               td_proc_params *params);                                    /* cuvidMapVideoFrame64 */
    int (*unmap)(void *decoder, unsigned long long ptr);                    /* cuvidUnmapVideoFrame64 */
    int (*copy_2d)(const td_memcpy2d *copy, void *stream);                  /* cuMemcpy2DAsync_v2 */
    int (*event_record)(void *event, void *stream);                         /* cuEventRecord */
    int (*event_synchronize)(void *event);                                  /* cuEventSynchronize */
} td_api;

/* What failed (``td_clip.failed``); ``_cuvid`` turns each into its message. */
enum {
    TD_OK = 0,
    TD_CALL = 1,           /* a driver call: ``call`` (TD_CALL_*), its CUresult in ``result`` */
    TD_NOT_DECODED = 2,    /* a wanted picture displayed without being decoded: packet ``detail`` */
    TD_NAL_OVERRUN = 3,    /* a NAL unit's size ``detail`` at byte ``detail2`` runs past packet ``current`` */
    TD_NAL_TRAILING = 4,   /* ``detail`` bytes after the last NAL unit of packet ``current`` */
    TD_NO_NAL = 5,         /* packet ``current`` holds no NAL unit */
    TD_STOPPED = 6,        /* the sequence callback (Python) failed; it holds the error */
    TD_NO_MEMORY = 7,
    TD_BAD_INDEX = 8,      /* the parser gave a picture index ``detail`` outside the surfaces */
};
enum { TD_CALL_PARSE, TD_CALL_DECODE, TD_CALL_MAP, TD_CALL_COPY, TD_CALL_EVENT_RECORD, TD_CALL_EVENT_SYNC };

typedef struct {
    const td_api *api;
    void *decoder;                  /* the decoder the pictures go to (set by the sequence callback) */
    void *stream;                   /* the maps and copies run on it */
    void *event;                    /* a blocking event: the wait before surfaces go back */
    unsigned long long base;        /* the batch buffer's device address */
    const int64_t *stamps;          /* [packets]: packet j's timestamp, its pts' rank */
    const int64_t *by_stamp;        /* [packets]: the packet of each timestamp */
    const int64_t *out_start;       /* [packets + 1] */
    const int64_t *out_offsets;     /* where packet j's picture goes: out_offsets[out_start[j]:out_start[j + 1]] */
    uint8_t *done;                  /* [packets]: its picture written */
    int64_t packets;
    int64_t current;                /* the packet being parsed */
    int32_t width, height;          /* the clip's frames (even) */
    int32_t skip;                   /* skip unwanted pictures that nothing refers to */
    int32_t output_surfaces;        /* mapped frames held at once, at most MAX_MAPPED */
    uint64_t decoded;               /* surfaces holding a picture decoded and not yet displayed */
    unsigned long long mapped[MAX_MAPPED];
    int32_t n_mapped;
    int32_t failed;                 /* TD_* */
    int64_t pictures;               /* pictures decoded */
    int64_t detail, detail2;
    int32_t call, result;
    td_proc_params proc;
} td_clip;

int64_t td_clip_size(void) { return (int64_t)sizeof(td_clip); }

static int fail(td_clip *c, int what, int64_t detail, int64_t detail2) {
    if (!c->failed) {
        c->failed = what;
        c->detail = detail;
        c->detail2 = detail2;
    }
    return 0;  /* the parser stops calling back */
}

static int fail_call(td_clip *c, int call, int result) {
    if (!c->failed) {
        c->call = call;
        c->result = result;
    }
    return fail(c, TD_CALL, 0, 0);
}

static int wanted(const td_clip *c, int64_t j) {
    return j >= 0 && j < c->packets && c->out_start[j] < c->out_start[j + 1];
}

/* Wait for the stream's copies, then give every mapped surface back. Where the wait fails they stay
 * mapped: a copy still under way must not read a surface the decoder writes again. 1 if done. */
static int unmap_all(td_clip *c) {
    if (!c->n_mapped)
        return 1;
    int r = c->api->event_record(c->event, c->stream);
    if (r)
        return fail_call(c, TD_CALL_EVENT_RECORD, r);
    r = c->api->event_synchronize(c->event);
    if (r)
        return fail_call(c, TD_CALL_EVENT_SYNC, r);
    for (int32_t k = 0; k < c->n_mapped; k++)
        c->api->unmap(c->decoder, c->mapped[k]);
    c->n_mapped = 0;
    return 1;
}

/* The sequence callback calls it before its clip's pictures go to another decoder. 0, or TD_*. */
int td_unmap(td_clip *c) {
    unmap_all(c);
    return c->failed;
}

int td_on_decode(void *user, void *picture) {
    td_clip *c = user;
    int index = *(const int *)((const char *)picture + PIC_CURR_IDX);
    if (index < 0 || index >= MAX_SURFACES)
        return fail(c, TD_BAD_INDEX, index, 0);
    if (c->skip && !wanted(c, c->current) && !*(const int *)((const char *)picture + PIC_REF_FLAG)) {
        c->decoded &= ~(1ull << index);  /* nothing refers to it and it is not wanted */
        return 1;
    }
    int r = c->api->decode_picture(c->decoder, picture);
    if (r)
        return fail_call(c, TD_CALL_DECODE, r);
    c->decoded |= 1ull << index;
    c->pictures++;
    return 1;
}

int td_on_display(void *user, td_display_info *info) {
    td_clip *c = user;
    if (!info)
        return 1;
    int index = info->picture_index;
    int64_t j = info->timestamp >= 0 && info->timestamp < c->packets ? c->by_stamp[info->timestamp] : -1;
    int want = wanted(c, j) && !c->done[j];
    if (index < 0 || index >= MAX_SURFACES || !(c->decoded >> index & 1)) {
        if (want)
            return fail(c, TD_NOT_DECODED, j, 0);
        return 1;
    }
    c->decoded &= ~(1ull << index);
    if (!want)
        return 1;
    if ((c->n_mapped >= c->output_surfaces || c->n_mapped >= MAX_MAPPED) && !unmap_all(c))
        return 0;
    c->proc.progressive_frame = info->progressive_frame;
    c->proc.top_field_first = info->top_field_first;
    unsigned long long ptr = 0;
    unsigned int pitch = 0;
    int r = c->api->map(c->decoder, index, &ptr, &pitch, &c->proc);
    if (r)
        return fail_call(c, TD_CALL_MAP, r);
    c->mapped[c->n_mapped++] = ptr;
    /* the CbCr plane's rows follow the Y plane's at the same pitch from row H (H even): one copy of 3/2 H
     * rows writes both planes, packed */
    td_memcpy2d copy;
    memset(&copy, 0, sizeof copy);
    copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = ptr;
    copy.srcPitch = pitch;
    copy.dstPitch = (size_t)c->width;
    copy.WidthInBytes = (size_t)c->width;
    copy.Height = (size_t)c->height + (size_t)c->height / 2;
    for (int64_t k = c->out_start[j]; k < c->out_start[j + 1]; k++) {
        copy.dstDevice = c->base + (unsigned long long)c->out_offsets[k];
        r = c->api->copy_2d(&copy, c->stream);
        if (r)
            return fail_call(c, TD_CALL_COPY, r);
    }
    c->done[j] = 1;
    return 1;
}

/* ``packet``'s NAL units each after a start code instead of its ``length_size``-byte big-endian size,
 * ``prefix`` before them, into ``out`` (room for ``prefix_len + 4 * len`` bytes: a NAL unit grows by at
 * most 3 bytes, and holds at least one besides its size); zero-sized units dropped, and zero bytes after
 * the last unit too few for a size (padding). The bytes written, or -TD_* (``c->detail`` set). */
static int64_t annexb(td_clip *c, const uint8_t *packet, int64_t len, int length_size, const uint8_t *prefix,
                      int64_t prefix_len, uint8_t *out) {
    int64_t n = prefix_len, at = 0;
    if (prefix_len)
        memcpy(out, prefix, (size_t)prefix_len);
    while (len - at >= length_size) {
        uint64_t size = 0;
        for (int k = 0; k < length_size; k++)
            size = size << 8 | packet[at + k];
        at += length_size;
        if (size > (uint64_t)(len - at)) {
            fail(c, TD_NAL_OVERRUN, (int64_t)size, at - length_size);
            return -TD_NAL_OVERRUN;
        }
        if (size) {
            out[n] = out[n + 1] = out[n + 2] = 0;
            out[n + 3] = 1;
            memcpy(out + n + 4, packet + at, (size_t)size);
            n += 4 + (int64_t)size;
        }
        at += (int64_t)size;
    }
    for (int64_t k = at; k < len; k++)
        if (packet[k]) {
            fail(c, TD_NAL_TRAILING, len - at, 0);
            return -TD_NAL_TRAILING;
        }
    if (n == prefix_len) {
        fail(c, TD_NO_NAL, 0, 0);
        return -TD_NO_NAL;
    }
    return n;
}

/* Bytes ``td_frame`` may write for ``n`` packets of ``total`` bytes. */
int64_t td_frame_bound(int64_t n, int64_t total, int64_t prefix_len, int length_size) {
    return prefix_len + (length_size > 0 ? 4 * total + 4 * n : total) + 1;
}

/* The clip's ``n`` packets (``data[offsets[j]:offsets[j + 1]]``) as the parser takes them, back to back in
 * ``out`` (``td_frame_bound`` bytes), packet j at ``out[out_at[j]:out_at[j + 1]]``: ``prefix`` before the
 * first, each re-framed from ``length_size``-byte sizes to Annex-B where ``length_size`` > 0. 0, or TD_*
 * (``c->current`` the packet that does not re-frame). */
int td_frame(td_clip *c, const uint8_t *data, const int64_t *offsets, int64_t n, const uint8_t *prefix,
             int64_t prefix_len, int length_size, uint8_t *out, int64_t *out_at) {
    int64_t at = 0;
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *payload = data + offsets[j];
        int64_t len = offsets[j + 1] - offsets[j], pre = j == 0 ? prefix_len : 0;
        c->current = j;
        out_at[j] = at;
        if (length_size > 0) {
            int64_t got = annexb(c, payload, len, length_size, prefix, pre, out + at);
            if (got < 0)
                return c->failed;
            at += got;
        } else {
            memcpy(out + at, prefix, (size_t)pre);
            memcpy(out + at + pre, payload, (size_t)len);
            at += pre + len;
        }
    }
    out_at[n] = at;
    return c->failed;
}

/* Feed the clip's ``n`` packets (decode order, from a keyframe) to ``parser`` with ``flags``, each with its
 * timestamp ``stamps[j]``, framed by ``td_frame`` where there is anything to frame; then end of stream,
 * which flushes the display queue. Every packet is framed before the first is parsed, into one buffer
 * that lives until the end of stream: nothing the parser was given is written again while it parses.
 * Stops at the first failure. 0, or TD_* (the details in ``c``). */
int td_decode(td_clip *c, void *parser, const uint8_t *data, const int64_t *offsets, int64_t n,
              unsigned long flags, const uint8_t *prefix, int64_t prefix_len, int length_size) {
    uint8_t *framed = NULL;
    int64_t *framed_at = NULL;
    if (n > 0 && (length_size > 0 || prefix_len)) {
        int64_t need = td_frame_bound(n, offsets[n] - offsets[0], prefix_len, length_size);
        framed = malloc((size_t)need);
        framed_at = malloc(sizeof(int64_t) * (size_t)(n + 1));
        if (!framed || !framed_at)
            fail(c, TD_NO_MEMORY, need, 0);
        else
            td_frame(c, data, offsets, n, prefix, prefix_len, length_size, framed, framed_at);
    }
    td_packet packet;
    for (int64_t j = 0; j < n && !c->failed; j++) {
        packet.flags = flags;
        if (framed) {
            packet.payload = framed + framed_at[j];
            packet.payload_size = (unsigned long)(framed_at[j + 1] - framed_at[j]);
        } else {
            packet.payload = data + offsets[j];
            packet.payload_size = (unsigned long)(offsets[j + 1] - offsets[j]);
        }
        packet.timestamp = c->stamps[j];
        c->current = j;
        int r = c->api->parse(parser, &packet);
        if (!c->failed && r)
            fail_call(c, TD_CALL_PARSE, r);
    }
    if (!c->failed) {
        packet.flags = PKT_ENDOFSTREAM;
        packet.payload_size = 0;
        packet.payload = NULL;
        packet.timestamp = 0;
        c->current = n;
        int r = c->api->parse(parser, &packet);
        if (!c->failed && r)
            fail_call(c, TD_CALL_PARSE, r);
    }
    free(framed);
    free(framed_at);
    return c->failed;
}
