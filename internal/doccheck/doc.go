// Package doccheck holds the tests that keep the documentation honest: every
// relative link of README.md and docs/*.md points at a file that exists (and
// at a heading of it, for a #fragment), and no page speaks of the project's
// internal issue numbers. It has no code of its own.
package doccheck
