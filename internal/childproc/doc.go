// Package childproc starts child processes that carry a parent-death signal
// (SysProcAttr.Pdeathsig) on an OS thread of their own.
//
// Linux sends the parent-death signal when the *thread* that forked the
// child exits, not the process. The Go runtime retires a thread when a
// goroutine that locked it (runtime.LockOSThread) ends without unlocking,
// which the test harnesses do on purpose for their servers. A child forked
// earlier from that thread by any other goroutine is then killed at a
// random moment: a walbox under test that dies for no reason, an initdb
// that reports "caught signal" halfway through its bootstrap. Forking from
// a thread locked until the child has exited ties the signal to the
// child's own life, as intended.
package childproc
