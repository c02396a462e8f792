// Package registrytest starts a real schema registry for integration
// tests: Apicurio Registry 2.4.2.Final with in-memory storage, a Quarkus
// application assembled from Maven Central jars by the Maven project
// e2e/registry (pom.xml), speaking the Confluent REST API at
// /apis/ccompat/v7.
//
// The first Start builds the application with mvn (68 s measured with an
// empty ~/.m2, which fills by ~270 MB; 72 s with a warm one: the Quarkus
// build dominates) into the cache directory ($WALBOX_REGISTRY_CACHE, else
// the user cache directory's walbox/), keyed by the project's content;
// later starts reuse it. A registry is then ready in 5.7 to 7.5 s (2 cores,
// loaded) with 146 to 188 MB RSS under
// -Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1.
//
// Apicurio differs from Confluent's registry in ways tests meet: its
// default compatibility is NONE (Start sets BACKWARD), an unknown subject
// answers error_code 40402 (not 40401), and /mode is not supported.
//
// Linux only (the JVM gets a parent-death signal, so it never outlives
// the test binary).
package registrytest
