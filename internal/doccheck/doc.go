// Package doccheck holds the tests that keep the documentation honest: every
// relative link of README.md and docs/*.md points at a file that exists (and
// at a heading of it, for a #fragment), no page speaks of the project's
// internal issue numbers, and every snippet of the docs and the packages'
// doc.go that commits Kafka offsets is the code of inbox's compiled Example,
// and the Java consumer of docs/schema-registry.md is the code of the program
// the e2e test decodes walbox's records with.
// It has no code of its own.
package doccheck
