// xdp_filter.bpf.c — the XDP program of bench/xdp_rate.cc: redirects IPv4/UDP frames to one
// IP:port into the AF_XDP socket of their receive queue and passes every other frame to the
// kernel (ARP, ICMP, TCP/gRPC, other ports, non-first fragments, VLAN-tagged frames).
//
// The address comes from the one-entry array map `xdp_filter_config` (written by the loader
// after loading: IPv4 address and UDP port, both in network byte order). The socket of queue q
// sits at index q of `xdp_filter_xsks`; a queue without a socket passes (redirect fallback
// XDP_PASS). Counters per verdict in `xdp_filter_counts` (per-CPU): [0] redirected, [1] passed.
//
// Built with `clang -O2 -target bpf` (bench/CMakeLists.txt); needs libbpf's bpf_helpers.h.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct xdp_filter_config {
  __u32 ipv4;  // network byte order
  __u16 port;  // network byte order
  __u16 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct xdp_filter_config);
} xdp_filter_config SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xdp_filter_xsks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} xdp_filter_counts SEC(".maps");

static __always_inline int Count(__u32 slot, int action) {
  __u64* n = bpf_map_lookup_elem(&xdp_filter_counts, &slot);
  if (n) *n += 1;
  return action;
}

SEC("xdp")
int xdp_filter(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* data_end = (void*)(long)ctx->data_end;
  __u32 zero = 0;
  struct xdp_filter_config* cfg = bpf_map_lookup_elem(&xdp_filter_config, &zero);
  if (!cfg) return XDP_PASS;

  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP)) return Count(1, XDP_PASS);
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5) return Count(1, XDP_PASS);
  if (ip->protocol != IPPROTO_UDP || ip->daddr != cfg->ipv4) return Count(1, XDP_PASS);
  // A non-first fragment carries no UDP header; the first one carries a port but not the whole
  // datagram: both stay with the kernel, which reassembles them.
  if (ip->frag_off & bpf_htons(0x3FFF)) return Count(1, XDP_PASS);
  struct udphdr* udp = (void*)ip + ip->ihl * 4;
  if ((void*)(udp + 1) > data_end || udp->dest != cfg->port) return Count(1, XDP_PASS);

  Count(0, 0);
  return bpf_redirect_map(&xdp_filter_xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
