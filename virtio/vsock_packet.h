/* virtio-vsock packets (virtio 1.2 §5.10.6): the header of <linux/virtio_vsock.h>,
 * little-endian on the wire, in host order here, and the limits the device holds the
 * guest to. Every packet travels in one descriptor chain: the header first, then len
 * bytes of payload (only OP_RW carries any). */
#ifndef MOTE_VIRTIO_VSOCK_PACKET_H
#define MOTE_VIRTIO_VSOCK_PACKET_H

#include <endian.h>
#include <stdint.h>

#include <linux/virtio_vsock.h>

/* §5.10.4: the host's well-known CID. */
#define VSOCK_HOST_CID 2
#define VSOCK_HDR_SIZE ((uint32_t)sizeof(struct virtio_vsock_hdr))
/* The most payload one packet may carry either way: Linux's
 * VIRTIO_VSOCK_MAX_PKT_BUF_SIZE. A guest packet announcing more is refused. */
#define VSOCK_MAX_PAYLOAD (64u * 1024u)

#define VSOCK_SHUTDOWN_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)

struct vsock_pkt {
	uint64_t src_cid;
	uint64_t dst_cid;
	uint32_t src_port;
	uint32_t dst_port;
	uint32_t len;
	uint16_t type;
	uint16_t op;
	uint32_t flags;
	uint32_t buf_alloc;
	uint32_t fwd_cnt;
};

static inline void vsock_pkt_decode(const struct virtio_vsock_hdr *hdr, struct vsock_pkt *pkt)
{
	*pkt = (struct vsock_pkt){
	    .src_cid = le64toh(hdr->src_cid),
	    .dst_cid = le64toh(hdr->dst_cid),
	    .src_port = le32toh(hdr->src_port),
	    .dst_port = le32toh(hdr->dst_port),
	    .len = le32toh(hdr->len),
	    .type = le16toh(hdr->type),
	    .op = le16toh(hdr->op),
	    .flags = le32toh(hdr->flags),
	    .buf_alloc = le32toh(hdr->buf_alloc),
	    .fwd_cnt = le32toh(hdr->fwd_cnt),
	};
}

static inline void vsock_pkt_encode(const struct vsock_pkt *pkt, struct virtio_vsock_hdr *hdr)
{
	*hdr = (struct virtio_vsock_hdr){
	    .src_cid = htole64(pkt->src_cid),
	    .dst_cid = htole64(pkt->dst_cid),
	    .src_port = htole32(pkt->src_port),
	    .dst_port = htole32(pkt->dst_port),
	    .len = htole32(pkt->len),
	    .type = htole16(pkt->type),
	    .op = htole16(pkt->op),
	    .flags = htole32(pkt->flags),
	    .buf_alloc = htole32(pkt->buf_alloc),
	    .fwd_cnt = htole32(pkt->fwd_cnt),
	};
}

#endif
