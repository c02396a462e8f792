// Package faultproxy is a TCP proxy for tests that cuts, stalls and slows the
// connections between a client (walbox) and a server (PostgreSQL, Kafka)
// without either of them knowing.
//
// Start listens on a free loopback port and forwards every connection to a
// target address. The client is given Addr instead of the server's address;
// Drop, Blackhole, Restore, CloseAll and SetLatency then inject faults while
// the test runs, and Stats shows what went through. Close stops everything.
// New is Start for a test: it fails the test on error and closes the Proxy
// in t.Cleanup.
//
// # Modes
//
// A Proxy is always in one of three modes, and a change of mode applies to
// the open connections and to new ones at once:
//
//   - ModeForward (Restore): bytes flow both ways, after the added latency.
//   - ModeDrop (Drop): every open connection is closed on both sides with a
//     TCP reset (SO_LINGER 0), and new connections are accepted and reset at
//     once, so the client's connect succeeds but its first read or write
//     fails. The listener stays open, so the port cannot be lost to another
//     process; a real "connection refused" cannot be emulated this way.
//   - ModeBlackhole (Blackhole): a network partition. Connections stay open
//     but no byte goes through in either direction; bytes sent meanwhile are
//     held, not delivered and not lost. A connection accepted during a
//     blackhole is not even dialled to the target until the partition heals.
//     A peer that closes or resets its side during a blackhole is held too:
//     the other side learns of it only after Restore.
//
// Restore after a blackhole heals the partition: the old connections resume
// and the held bytes arrive, in order, as TCP would deliver them after a
// partition shorter than its retransmission timeout. To model a partition
// that outlasted the peers' patience instead, call CloseAll before (or
// after) Restore: it resets the open connections and keeps accepting.
//
// StallOpen is not a mode: it stops the target-to-client direction of the
// connections open at the call, for good, and leaves new connections alone
// (a connection TCP stopped delivering, while the peers are alive).
//
// "At once" is at the granularity of a chunk (up to 32 KiB): a chunk whose
// write to the far side had already begun when Blackhole was called is still
// delivered.
//
// # What a blackhole does not hide
//
// The proxy works above TCP, so it cannot drop packets: the kernel still
// acknowledges everything the client sends, until the socket buffers (and
// the proxy's own, 256 KiB per direction) are full. The client therefore
// sees its writes succeed for a while, and TCP keepalive and TCP_USER_TIMEOUT
// never fire. A blackhole tests the application's own timeouts (read
// deadlines, request timeouts, replication status timeouts), which is what
// walbox relies on.
//
// # Latency
//
// SetLatency delays every chunk by a fixed one-way delay measured from the
// moment the proxy read it, in both directions, so a request and its reply
// take twice the latency. Chunks are pipelined: a bulk transfer is delayed,
// not throttled to one chunk per delay (up to 256 KiB may be in flight per
// direction, which caps throughput at 256 KiB per latency).
//
// # Kafka: advertised addresses bypass the proxy
//
// A Kafka client uses its seed address only to fetch metadata; it then
// connects to the address each broker advertises (advertised.listeners).
// A proxy given to the client as its seed therefore carries only the
// bootstrap Metadata requests, and every produce and fetch goes straight to
// the broker,
// untouched by Drop or Blackhole. To put a broker behind the proxy, the
// broker must advertise the proxy's address:
//
//  1. StartListener, to learn the proxy's address before the broker exists;
//  2. start the broker with advertised.listeners=PLAINTEXT://<p.Addr()>
//     while it listens on its own port;
//  3. SetTarget to that port, and give the client p.Addr() as its seed.
//
// Connections accepted before SetTarget are reset, as during Drop. With
// several brokers, each needs its own proxy. A broker that connects to its
// own advertised address (replication in a multi-broker cluster, not a
// single combined KRaft node) goes through the proxy too, and suffers the
// same faults. PostgreSQL has no such indirection: Start(server address) is
// enough.
//
// # Concurrency and goroutines
//
// All methods of Proxy are safe for concurrent use. Every goroutine the
// package starts is owned: the Proxy's accept loop and the goroutines of
// each connection end when the connection ends or Close is called, and
// Close waits for all of them, so a closed Proxy leaves none behind.
package faultproxy
