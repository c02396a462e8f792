// Package registrytest starts a real schema registry for integration
// tests: Apicurio Registry 2.4.2.Final with in-memory storage, a Quarkus
// application assembled from Maven Central jars by the Maven project
// e2e/registry (pom.xml), speaking the Confluent REST API at
// /apis/ccompat/v7.
//
// The first Start builds the application with mvn (about a minute with an
// empty ~/.m2, which fills by ~270 MB) into the cache directory
// ($WALBOX_REGISTRY_CACHE, else the user cache directory's walbox/), keyed
// by the project's content; later starts reuse it. A registry starts in
// ~2-8 s (2 cores, loaded) and holds ~190 MB RSS with
// -Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1.
//
// Apicurio differs from Confluent's registry in ways tests meet: its
// default compatibility is NONE (Start sets BACKWARD), an unknown subject
// answers error_code 40402 (not 40401), and /mode is not supported.
//
// Linux only (the JVM gets a parent-death signal, so it never outlives
// the test binary).
package registrytest
