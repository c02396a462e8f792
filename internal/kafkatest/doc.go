// Package kafkatest runs throwaway Apache Kafka brokers for tests and demos.
//
// StartBroker runs a real single-node Kafka 4.x broker in KRaft mode (one JVM
// that is both broker and controller) on free loopback ports, with its data
// in a fresh temporary directory, and waits until it answers a Metadata
// request. Kill, Restart and Stop inject faults; Close stops the broker and
// removes its directory. The core API needs no *testing.T; Start and Shared
// are the helpers for tests, and they use an existing broker instead when
// KAFKA_BROKERS is set.
//
// # Where the broker comes from
//
// The jars are named by the Maven project e2e/kafka/pom.xml. The first start
// on a machine runs `mvn dependency:build-classpath` on it (jars land in
// ~/.m2) and caches the classpath in <user cache dir>/walbox/, keyed by the
// pom's hash, so later starts need no Maven at all. Java 17 or newer must be
// on PATH or in JAVA_HOME. When java (or, before the classpath is cached,
// mvn) is missing, StartBroker fails with an error wrapping ErrUnavailable,
// which Start turns into a skip unless WALBOX_REQUIRE_INTEGRATION=1.
//
// # Startup time
//
// A JVM starting Kafka spends most of its time loading and verifying classes:
// about 7 s on a 2-core machine with the C1-only JIT, 12-16 s with the
// default tiered JIT. The first graceful Stop or Close of a broker therefore
// writes a dynamic class-data-sharing archive (-XX:ArchiveClassesAtExit,
// about 50 MB, next to the cached classpath; the dump adds about 5 s to that
// one stop), and every later JVM maps it (-XX:SharedArchiveFile) and starts
// in about 2 s. The archive is keyed by the java binary and by the size and
// time of every jar, so a changed JDK or re-downloaded jar makes a new one.
// Options.DisableCDS turns this off.
//
// Measured on a 2-core machine, StartBroker until ready:
//
//   - first run with an empty ~/.m2 (Maven downloads about 67 MB): 27 s
//   - jars in ~/.m2, classpath and archive not cached: 16 s
//   - everything cached: 2.5-3 s (storage format 1 s, broker 2 s); the
//     storage is formatted once per process and options and copied for
//     later brokers (format.go), which skip that second
//
// Restart after Kill takes about 6 s, most of it waiting for the killed
// broker's 4 s session to expire (see serverProperties); Restart after Stop
// about 2.5 s.
//
// # Processes
//
// A broker never outlives the process that started it: the JVM runs in its
// own process group (a Ctrl-C meant for `go test` does not reach it) and the
// kernel sends it SIGKILL when its parent dies, even by SIGKILL or a test
// timeout (Linux only; elsewhere StartBroker returns ErrUnavailable). Kill
// and Close end the whole process group. A temporary directory is removed
// only by Close.
//
// Brokers are tuned for speed on small machines (512 MiB heap, serial GC, C1
// JIT, replication factor 1 everywhere) and hold no data worth keeping.
//
// # Clusters
//
// NewCluster (StartCluster in tests) runs three nodes as production runs
// Kafka: each a broker and a voting controller (combined mode, a static
// quorum), replication factor 3 and min.insync.replicas=2 for every topic,
// the internal ones included, Kafka's default 9 s broker session, 384 MiB
// heaps. Every node is a *Broker (Kill, Stop, Restart, Pause, Resume);
// Leader, TxnCoordinator and ActiveController find the node to fault, and
// WaitInSync waits until the cluster is fully replicated again. The nodes
// share one cluster id and are started together (a node is ready only once
// a majority of the quorum runs): about 13 s on a loaded 2-core machine.
// Close kills them: nodes shutting down together lose the quorum, and a
// controlled shutdown then waits for a controller that is gone.
package kafkatest
