/*
 * sdt_serial.c - packets and the kernel's text, framed on one byte stream (a UART) (transport layer).
 *
 * A frame, every field little-endian:
 *
 *   0  sync    A5 5A 53 44 ("\xa5\x5aSD")
 *   4  type    SDT_FRAME_PACKET, SDT_FRAME_VERDICT, SDT_FRAME_TEXT or SDT_FRAME_INFO
 *   5  zero    0
 *   6  check   the low 16 bits of CRC-32 of bytes 4, 5 and 8..11 (type, zero, length)
 *   8  length  bytes of payload
 *  12  payload
 *      crc     CRC-32 (zlib's) of bytes 4..11 and the payload
 *
 * A reader that lost its place looks for the sync, and believes a header
 * only when its check holds: a false sync inside binary data then costs it
 * nothing. Bytes outside frames (a panic message, early boot output) are
 * the kernel's console, shown as they are.
 *
 * An info frame (sdt_serial_info, once, before the first packet) gives a reader what the packets
 * do not say: the clock's rate and the width of a word.
 *
 * A packet is sent as it stands in the ring (its content_size bytes), then
 * released (sdt_consume_done) and followed by a verdict frame: keep it, or
 * drop it because the CPU's writer reopened its slot while it was being
 * sent (SDT_OVERWRITE). A reader holds a packet until its verdict. The bytes
 * are copied through a small buffer first, so the CRC covers exactly what
 * went out even when the writer was overwriting them.
 *
 * The caller serializes: put() is called for consecutive pieces of one
 * frame, so the line must be the caller's alone during a call (a lock around
 * every drain and every other frame or console write on that line). Only one
 * consumer drains a given ring at a time (the same lock does that).
 */
#include "sdt_internal.h"

#define CHUNK 64	/* bytes copied out of the ring at a time */

static const sdt_u32 crc_nibble[16] = {
	0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u, 0x4db26158u, 0x5005713cu,
	0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu, 0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu,
};

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): crc of nothing is 0; crc32(crc32(0, a), b) is that of a then b. */
SDT_CODE sdt_u32 sdt_crc32(sdt_u32 crc, const void *data, unsigned long len)
{
	const sdt_u8 *p = (const sdt_u8 *)data;

	if (!p)
		return crc;
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		crc = (crc >> 4) ^ crc_nibble[crc & 15];
		crc = (crc >> 4) ^ crc_nibble[crc & 15];
	}
	return ~crc;
}

static SDT_CODE void le32(sdt_u8 *p, sdt_u32 v)
{
	p[0] = (sdt_u8)v;
	p[1] = (sdt_u8)(v >> 8);
	p[2] = (sdt_u8)(v >> 16);
	p[3] = (sdt_u8)(v >> 24);
}

/* The header of a frame of ``type`` with ``len`` bytes of payload; returns the CRC so far. */
static SDT_CODE sdt_u32 header(sdt_serial_put put, unsigned type, sdt_u32 len)
{
	sdt_u8 h[sizeof(struct sdt_frame_header)] = {(sdt_u8)SDT_FRAME_SYNC, (sdt_u8)(SDT_FRAME_SYNC >> 8),
		(sdt_u8)(SDT_FRAME_SYNC >> 16), (sdt_u8)(SDT_FRAME_SYNC >> 24), (sdt_u8)type, 0, 0, 0};
	sdt_u32 check;

	le32(h + 8, len);
	check = sdt_crc32(0, h + 4, 2);
	check = sdt_crc32(check, h + 8, 4);
	h[6] = (sdt_u8)check;
	h[7] = (sdt_u8)(check >> 8);
	put(h, sizeof(h));
	return sdt_crc32(0, h + 4, 8);
}

static SDT_CODE void trailer(sdt_serial_put put, sdt_u32 crc)
{
	sdt_u8 t[4];

	le32(t, crc);
	put(t, sizeof(t));
}

SDT_CODE int sdt_serial_frame(sdt_serial_put put, unsigned type, const void *data, unsigned long len)
{
	return sdt_serial_frame_parts(put, type, data, len, 0, 0);
}

SDT_CODE int sdt_serial_frame_parts(sdt_serial_put put, unsigned type, const void *head, unsigned long head_len,
				    const void *body, unsigned long body_len)
{
	sdt_u32 crc;
	unsigned long len = head_len + body_len;

	if (!put || type > 0xff || (head_len && !head) || (body_len && !body) || len < head_len ||
	    len != (sdt_u32)len)
		return SDT_ERR_ARG;
	crc = header(put, type, (sdt_u32)len);
	if (head_len)
		put(head, head_len);
	if (body_len)
		put(body, body_len);
	crc = sdt_crc32(crc, head, head_len);
	trailer(put, sdt_crc32(crc, body, body_len));
	return 0;
}

/* One packet of the ring as it stands, copied CHUNK bytes at a time (the CRC covers what was sent). */
static SDT_CODE void send_packet(sdt_serial_put put, const struct sdt_packet *pk, sdt_u32 len)
{
	const volatile sdt_u8 *from = (const volatile sdt_u8 *)pk;
	sdt_u8 buf[CHUNK];
	sdt_u32 crc = header(put, SDT_FRAME_PACKET, len), at, n, i;

	for (at = 0; at < len; at += n) {
		n = len - at < CHUNK ? len - at : CHUNK;
		for (i = 0; i < n; i++)
			buf[i] = from[at + i];
		crc = sdt_crc32(crc, buf, n);
		put(buf, n);
	}
	trailer(put, crc);
}

SDT_CODE int sdt_serial_drain(struct sdt_cpu *c, sdt_serial_put put)
{
	const struct sdt_packet *pk;
	sdt_u64 seq;
	int kept = 0;

	if (!c || !put)
		return SDT_ERR_ARG;
	while ((pk = sdt_consume(c, &seq))) {
		sdt_u64 content = ((const volatile struct sdt_packet *)pk)->content_size / 8;
		sdt_u8 v[16];
		int intact;

		if (content < sizeof(*pk) || content > c->packet_size)	/* being rewritten: its verdict drops it */
			content = c->packet_size;
		send_packet(put, pk, (sdt_u32)content);
		intact = sdt_consume_done(c, seq) == 1;
		le32(v, (sdt_u32)(seq + 1));	/* packet_seq_num: the header's numbering, from 1 */
		le32(v + 4, (sdt_u32)((seq + 1) >> 32));
		le32(v + 8, (sdt_u32)c->cpu);
		le32(v + 12, (sdt_u32)intact);
		sdt_serial_frame(put, SDT_FRAME_VERDICT, v, sizeof(v));
		kept += intact;
	}
	return kept;
}

SDT_CODE int sdt_serial_info(sdt_serial_put put)
{
	sdt_u8 v[16];

	if (!put)
		return SDT_ERR_ARG;
	le32(v, (sdt_u32)sdt_hooks.clock_hz);
	le32(v + 4, (sdt_u32)(sdt_hooks.clock_hz >> 32));
	le32(v + 8, (sdt_u32)sizeof(sdt_word) * 8);
	le32(v + 12, 0);
	return sdt_serial_frame(put, SDT_FRAME_INFO, v, sizeof(v));
}
