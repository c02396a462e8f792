package faultproxy_test

import (
	"fmt"
	"log"

	"github.com/walbox/walbox/internal/faultproxy"
)

// A PostgreSQL server needs only Start: the client connects to p.Addr()
// instead of the server.
func ExampleStart() {
	p, err := faultproxy.Start("127.0.0.1:5432")
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	dsn := fmt.Sprintf("postgres://walbox@%s/app?replication=database", p.Addr())
	_ = dsn // run walbox against dsn, then:

	p.Blackhole() // a partition: walbox must notice within its timeouts
	p.Restore()   // healed: old connections resume
	p.Drop()      // every connection reset, new ones refused
	p.Restore()
}

// A Kafka broker must advertise the proxy's address, or clients bypass the
// proxy after their first Metadata request. Start the listener first, give
// its address to the broker, then point the proxy at the broker.
func ExampleStartListener() {
	p, err := faultproxy.StartListener()
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	advertised := "PLAINTEXT://" + p.Addr()
	// Start the broker with advertised.listeners=advertised, listening on
	// its own port, then point the proxy at that port.
	_ = advertised
	if err := p.SetTarget("127.0.0.1:9092"); err != nil {
		log.Fatal(err)
	}
	// Give clients p.Addr() as their seed broker.
}
