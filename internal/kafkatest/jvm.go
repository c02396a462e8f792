package kafkatest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// findJava returns opts.Java, $JAVA_HOME/bin/java or java on PATH.
func findJava(opts Options) (string, error) {
	if opts.Java != "" {
		if _, err := os.Stat(opts.Java); err != nil {
			return "", fmt.Errorf("%w: Options.Java: %v", ErrUnavailable, err)
		}
		return opts.Java, nil
	}
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w: java (17 or newer) is not in JAVA_HOME or on PATH (apt-get install openjdk-17-jre-headless): %v", ErrUnavailable, err)
	}
	return p, nil
}

// jvmDefaults are the JVM flags of every broker and formatter run, chosen
// for fast startup on a 2-core machine (measured on one, time until "Kafka
// Server started" with an empty log, no CDS archive):
//
//   - -XX:TieredStopAtLevel=1 compiles with C1 only: 7-9 s against 12-16 s
//     with the default tiered JIT. Peak throughput is lower, which tests
//     producing thousands of records do not notice.
//   - SerialGC: no GC threads competing for the two cores; with a 512 MiB
//     heap its pauses stay in milliseconds.
//   - -XX:-UsePerfData: no hsperfdata file left in /tmp after a SIGKILL.
//   - ExitOnOutOfMemoryError: a broker out of heap dies visibly instead of
//     limping on with dead threads.
var jvmDefaults = []string{
	"-Xms256m",
	"-Xmx512m",
	"-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1",
	"-XX:-UsePerfData",
	"-XX:+ExitOnOutOfMemoryError",
	"-Djava.awt.headless=true",
}

// cdsMagic starts a dynamic CDS archive (CDS_DYNAMIC_ARCHIVE_MAGIC in
// HotSpot's cds/cdsConstants.hpp), little-endian on amd64 and arm64.
const cdsMagic = 0xf00baba8

// cdsArchivePath names the class-data-sharing archive for this java binary
// and classpath. HotSpot refuses an archive whose jars changed size or
// modification time (it then starts without one, slowly, and says so on
// stdout), so those are part of the key: a re-downloaded jar or a new JDK
// gets a fresh archive instead of a permanently ignored one.
func cdsArchivePath(dir, java string, cp classpath) string {
	h := sha256.New()
	stamp := func(path string) {
		io.WriteString(h, path)
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		if fi, err := os.Stat(path); err == nil {
			io.WriteString(h, "\x00"+path+"\x00"+strconv.FormatInt(fi.Size(), 10)+"\x00"+strconv.FormatInt(fi.ModTime().UnixNano(), 10))
		}
		h.Write([]byte{0})
	}
	stamp(java)
	for _, j := range cp.jars {
		stamp(j)
	}
	io.WriteString(h, fmt.Sprint(jvmDefaults))
	return filepath.Join(dir, "kafka-"+cp.version+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".jsa")
}

// validArchive reports whether path looks like a complete dynamic CDS
// archive. A JVM killed while dumping leaves a truncated file, which must
// not become the shared archive.
func validArchive(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Size() > 1<<20 && binary.LittleEndian.Uint32(magic[:]) == cdsMagic
}

// cdsArgs returns the JVM flags for class-data sharing and, when this JVM is
// to write the archive at exit, the temporary path it writes to. The
// archive is written under a private name and renamed by the caller only
// after a graceful exit, so concurrent brokers never read a half-written
// archive.
func cdsArgs(archive string, dump bool) (args []string, dumpPath string) {
	if archive == "" {
		return nil, ""
	}
	if _, err := os.Stat(archive); err == nil {
		// -Xshare:auto (the default) starts without the archive if HotSpot
		// rejects it.
		return []string{"-XX:SharedArchiveFile=" + archive, "-Xlog:cds=off", "-Xlog:cds+dynamic=off"}, ""
	}
	if !dump {
		return nil, ""
	}
	dumpPath = archive + "." + strconv.Itoa(os.Getpid()) + "-" + randomHex(4) + ".tmp"
	// The dump warns about every class it skips (hundreds of lines).
	return []string{"-XX:ArchiveClassesAtExit=" + dumpPath, "-Xlog:cds=off", "-Xlog:cds+dynamic=off"}, dumpPath
}

// staleDumpAge is how old an unfinished archive dump must be before
// sweepStaleDumps removes it; a dump takes seconds.
const staleDumpAge = 15 * time.Minute

// sweepStaleDumps removes archive dumps (50 MB each) that no JVM will finish:
// those of a JVM killed while dumping, because its test binary died during
// Close.
func sweepStaleDumps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "kafka-*.jsa.*.tmp"))
	for _, p := range tmps {
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > staleDumpAge {
			_ = os.Remove(p)
		}
	}
}

// commitArchive moves a freshly dumped archive into place, or discards it.
func commitArchive(dumpPath, archive string, graceful bool) {
	if dumpPath == "" {
		return
	}
	if graceful && validArchive(dumpPath) {
		if err := os.Rename(dumpPath, archive); err == nil {
			return
		}
	}
	_ = os.Remove(dumpPath)
}

// jvmOutputTail returns the end of the JVM's own stdout and stderr (crash
// messages, bad flags), which the broker log cannot hold.
func jvmOutputTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	return tail(b, n)
}
