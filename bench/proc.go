package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of the CPU times in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procStat is the part of /proc/PID/stat the benchmark reads.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) is in parentheses and may contain spaces;
	// the fields after the last ')' are fixed.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime..cstime fields 14-17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var s procStat
	s.ppid, _ = strconv.Atoi(f[1])
	s.utime, _ = strconv.ParseInt(f[11], 10, 64)
	s.stime, _ = strconv.ParseInt(f[12], 10, 64)
	s.cutime, _ = strconv.ParseInt(f[13], 10, 64)
	s.cstime, _ = strconv.ParseInt(f[14], 10, 64)
	return s, nil
}

// treeCPU returns the CPU time of pid, of its reaped children and of its
// living direct children.
func treeCPU(pid int) (time.Duration, error) {
	root, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	ticks := root.utime + root.stime + root.cutime + root.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readProcStat(child)
		if err != nil || s.ppid != pid {
			continue // gone meanwhile, or not ours
		}
		ticks += s.utime + s.stime + s.cutime + s.cstime
	}
	return time.Duration(ticks) * clockTick, nil
}

// processCPU returns the CPU time pid has used.
func processCPU(pid int) (time.Duration, error) {
	s, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(s.utime+s.stime) * clockTick, nil
}

// peakRSS returns VmHWM of pid, the peak resident set size, in bytes.
func peakRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "VmHWM:") {
			continue
		}
		fields := strings.Fields(line[len("VmHWM:"):])
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("/proc/%d/status: unexpected %q", pid, line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// loadAvg returns the 1, 5 and 15 minute load averages, "" if unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// selfCPU returns the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy returns the CPU time all CPUs spent busy since boot, from the
// first line of /proc/stat (user, nice, system, irq, softirq, steal).
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// childrenCPU returns the CPU time of this process's reaped children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveChildrenCPU returns the CPU time of this process's living children
// (the broker JVM, a walbox process), without their own children.
func liveChildrenCPU() time.Duration {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readProcStat(pid)
		if err != nil || s.ppid != self {
			continue
		}
		ticks += s.utime + s.stime
	}
	return time.Duration(ticks) * clockTick
}

// cpuWatch measures how much of the machine processes outside the benchmark
// used during a run: the benchmark assumes an idle machine, and a busy one
// slows every relay unevenly.
type cpuWatch struct {
	env        *Env
	at         time.Time
	busy, ours time.Duration
	ok         bool
}

func (e *Env) ourCPU() time.Duration {
	// Postgres is a child of this process: its tree is counted by pgCPU,
	// so only the other living children are added here.
	pg, _ := e.pgCPU()
	others := liveChildrenCPU()
	if pid := e.postmasterPID(); pid > 0 {
		if s, err := readProcStat(pid); err == nil {
			others -= time.Duration(s.utime+s.stime) * clockTick
		}
	}
	return selfCPU() + childrenCPU() + pg + others
}

func (e *Env) startCPUWatch() cpuWatch {
	busy, err := machineBusy()
	return cpuWatch{env: e, at: time.Now(), busy: busy, ours: e.ourCPU(), ok: err == nil}
}

// otherPct returns the share of the machine's CPU capacity, in percent,
// that processes outside the benchmark used since the watch started.
func (w cpuWatch) otherPct() float64 {
	busy, err := machineBusy()
	if err != nil || !w.ok {
		return -1
	}
	capacity := time.Since(w.at).Seconds() * float64(runtime.NumCPU())
	other := (busy - w.busy - (w.env.ourCPU() - w.ours)).Seconds()
	return max(0, 100*other/capacity)
}
