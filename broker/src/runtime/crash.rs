//! Crash evidence: a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes what
//! died and where to the log (stderr) and to `<data_dir>/crash-report.txt` before the
//! process dies of that same signal; the next start reads the report and a marker file
//! (`strand.running`, present from start to orderly exit) and exposes the previous exit in
//! `/metrics` (`strand_previous_exit_unclean`) and at start-up in the log. The marker is
//! only sound if one process uses a data directory at a time, so `install` first takes an
//! exclusive `flock` on `<data_dir>/strand.lock` for the life of the process (the kernel
//! drops it at any death, kill -9 included) and refuses to start when another holds it.
//!
//! Invariant: the handler calls only async-signal-safe functions (`write`, `open`, `prctl`,
//! `nanosleep`, `backtrace` warmed up at install, `backtrace_symbols_fd`) and allocates
//! nothing, so the signal, the thread and the raw frames are written even when the crash
//! happened inside the allocator or on the small alternate signal stack of a thread that
//! overflowed its own. Symbolising (which allocates and needs stack) is done by a thread
//! started at install, woken through a pipe; the handler waits for it at most
//! `SYMBOLISE_TIMEOUT_S` and then dies of the original signal in every case. In this file
//! because it needs `unsafe` (STYLE.md 7).

use std::ffi::{c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Written by the crash handler, read (and kept as `crash-report.prev.txt`) at the next start.
pub const CRASH_REPORT_FILE: &str = "crash-report.txt";
/// The previous run's report, kept for the operator after the next start read it.
pub const CRASH_REPORT_PREV_FILE: &str = "crash-report.prev.txt";
/// Present from start-up to an orderly exit: found at start, the previous run died.
pub const RUNNING_MARKER_FILE: &str = "strand.running";
/// Locked (flock, exclusive) by the process that uses the data directory.
pub const LOCK_FILE: &str = "strand.lock";
/// Longest the symbolised backtrace may take (it allocates, which can deadlock in a crash
/// inside the allocator); the raw frames before it are written regardless.
pub const SYMBOLISE_TIMEOUT_S: u32 = 10;
/// Raw frames written; deeper stacks are cut (the symbolised backtrace has them all).
pub const RAW_FRAMES_MAX: usize = 64;
/// Longest report read back at start-up.
pub const REPORT_BYTES_MAX: u64 = 256 * 1024;

/// The signals reported.
const FATAL_SIGNALS: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// How the previous run of this data directory ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreviousExit {
    /// It did not reach an orderly exit (crash, kill -9, power loss, OOM kill).
    pub unclean: bool,
    /// The fatal signal its crash report names ("SIGSEGV"), if it wrote one.
    pub signal: Option<String>,
}

static PREVIOUS: OnceLock<PreviousExit> = OnceLock::new();
static REPORT_PATH: OnceLock<CString> = OnceLock::new();
static MARKER_PATH: OnceLock<PathBuf> = OnceLock::new();
/// Set by the first crashing thread; a second one waits for it to finish.
static REPORTING: AtomicBool = AtomicBool::new(false);
/// The crashing thread's frames, handed to the symboliser thread.
static FRAMES: [AtomicUsize; RAW_FRAMES_MAX] = [const { AtomicUsize::new(0) }; RAW_FRAMES_MAX];
static FRAME_COUNT: AtomicUsize = AtomicUsize::new(0);
/// The crash report's descriptor while a report is written (-1: none).
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);
/// The write end of the pipe that wakes the symboliser (-1 before install).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// Set by the symboliser when it has written the symbolised frames.
static SYMBOLISED: AtomicBool = AtomicBool::new(false);

extern "C" {
    // glibc <execinfo.h>; `backtrace` loads libgcc's unwinder on first use, which is why
    // `install` calls it once before any crash.
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
    fn backtrace_symbols_fd(buffer: *const *mut c_void, size: c_int, fd: c_int);
}

impl PreviousExit {
    /// The `signal` label of `strand_previous_exit_unclean` and the start-up warning: the
    /// report's signal, "unknown" for an unclean exit without a report, "none" otherwise.
    pub fn signal_label(&self) -> &str {
        match (&self.signal, self.unclean) {
            (Some(s), _) => s,
            (None, true) => "unknown",
            (None, false) => "none",
        }
    }
}

/// How the previous run ended (default before `install`).
pub fn previous_exit() -> PreviousExit {
    PREVIOUS.get().cloned().unwrap_or_default()
}

/// Makes any panic abort the process after the default hook has printed it, whatever the
/// build profile's `panic` setting (the dev profile unwinds so that tests and binaries share
/// their compiled dependencies): a shard's state is half-updated after a panic, and a
/// restart is safe where a half-alive process is not (STYLE.md 5). The abort raises
/// SIGABRT, whose handler writes the crash report.
pub fn abort_on_panic() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        print(info);
        std::process::abort();
    }));
}

/// Reads how the previous run ended, marks this one running and installs the handlers.
pub fn install(data_dir: &Path) -> anyhow::Result<PreviousExit> {
    use anyhow::Context;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    lock_data_dir(data_dir)?;
    let previous = read_previous(data_dir);
    let marker = data_dir.join(RUNNING_MARKER_FILE);
    std::fs::write(&marker, marker_text())
        .with_context(|| format!("writing {}", marker.display()))?;
    let _ = MARKER_PATH.set(marker);
    let report = data_dir.join(CRASH_REPORT_FILE);
    let report = CString::new(report.as_os_str().as_encoded_bytes())
        .context("the data directory path holds a NUL byte")?;
    let _ = REPORT_PATH.set(report);
    let _ = PREVIOUS.set(previous.clone());
    warm_up_backtrace();
    start_symboliser()?;
    for sig in FATAL_SIGNALS {
        set_handler(sig, on_fatal_signal)?;
    }
    Ok(previous)
}

/// Takes the data directory's lock for the rest of the process's life (the descriptor is
/// deliberately never closed).
fn lock_data_dir(data_dir: &Path) -> anyhow::Result<()> {
    use std::os::fd::IntoRawFd;
    let path = data_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
    let fd = file.into_raw_fd();
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: closing the descriptor we opened and did not lock.
        unsafe { libc::close(fd) };
        let holder = std::fs::read_to_string(data_dir.join(RUNNING_MARKER_FILE))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown pid".to_string());
        anyhow::bail!(
            "the data directory {} is in use by another strand process ({holder}; flock of {}: \
             {e}): stop that process or give this one its own --data-dir",
            data_dir.display(),
            path.display()
        );
    }
    Ok(())
}

/// An orderly exit: the next start finds no marker. Only this process's own marker is
/// removed (a second broker started on a running one's data directory, which fails to
/// bind, must not erase the evidence of the first).
pub fn clean_exit() {
    if let Some(m) = MARKER_PATH.get() {
        if std::fs::read_to_string(m).is_ok_and(|s| s == marker_text()) {
            let _ = std::fs::remove_file(m);
        }
    }
}

fn marker_text() -> String {
    format!("pid {}\n", std::process::id())
}

/// Reads the marker and the report the previous run left, and moves the report aside.
fn read_previous(data_dir: &Path) -> PreviousExit {
    let unclean = data_dir.join(RUNNING_MARKER_FILE).exists();
    let report_path = data_dir.join(CRASH_REPORT_FILE);
    let report = std::fs::File::open(&report_path).ok().and_then(|f| {
        use std::io::Read;
        let mut s = String::new();
        f.take(REPORT_BYTES_MAX).read_to_string(&mut s).ok()?;
        Some(s)
    });
    if report.is_some() {
        let _ = std::fs::rename(&report_path, data_dir.join(CRASH_REPORT_PREV_FILE));
    }
    let signal = report.as_deref().and_then(signal_named_in);
    PreviousExit {
        // A report is only written by a run that died of its signal.
        unclean: unclean || report.is_some(),
        signal,
    }
}

/// The signal name in a report's first line ("strand: fatal signal SIGSEGV ...").
fn signal_named_in(report: &str) -> Option<String> {
    let first = report.lines().next()?;
    let rest = first.split("fatal signal ").nth(1)?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    name.starts_with("SIG").then_some(name)
}

fn warm_up_backtrace() {
    let mut frames = [std::ptr::null_mut::<c_void>(); 4];
    // SAFETY: the buffer holds 4 pointers and we pass 4.
    unsafe { backtrace(frames.as_mut_ptr(), 4) };
}

/// An SA_SIGINFO signal handler.
type Handler = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);

fn set_handler(sig: c_int, handler: Handler) -> anyhow::Result<()> {
    // SAFETY: sigaction is plain data; every field we rely on is set below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as libc::sighandler_t;
    // SA_ONSTACK: Rust gives every thread an alternate signal stack, so a stack overflow
    // is reported too. SA_RESETHAND: the signal raised again at the end kills.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESETHAND;
    // SAFETY: `action` is a valid sigaction and `sa_mask` a valid set to clear.
    let rc = unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut())
    };
    if rc != 0 {
        anyhow::bail!(
            "sigaction({sig}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

fn signal_name(sig: c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        _ => "signal",
    }
}

/// A fixed buffer formatted without allocating (the handler's first part may run inside a
/// crashed allocator).
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            buf: [0; 512],
            len: 0,
        }
    }
    fn text(&mut self, s: &[u8]) -> &mut Line {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
        self
    }
    fn num(&mut self, mut v: u64, radix: u64) -> &mut Line {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            let d = (v % radix) as u8;
            digits[i] = if d < 10 { b'0' + d } else { b'a' + d - 10 };
            v /= radix;
            if v == 0 {
                break;
            }
        }
        self.text(&digits[i..])
    }
    fn write_to(&self, fds: &[c_int]) {
        for &fd in fds.iter().filter(|&&fd| fd >= 0) {
            write_all(fd, &self.buf[..self.len]);
        }
    }
}

fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of the length given.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => bytes = &bytes[n.min(bytes.len())..],
            _ => return,
        }
    }
}

/// The calling thread's name (the shard's, e.g. "shard-0-1"), NUL-terminated in `buf`.
fn thread_name(buf: &mut [u8; 17]) -> &[u8] {
    // SAFETY: PR_GET_NAME writes at most 16 bytes plus NUL into the 17-byte buffer.
    let rc = unsafe {
        libc::prctl(
            libc::PR_GET_NAME,
            buf.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return b"?";
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(16);
    &buf[..len]
}

/// Starts the thread that symbolises a crashing thread's frames; it sleeps in `read` on a
/// pipe until the handler writes to it.
fn start_symboliser() -> anyhow::Result<()> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        anyhow::bail!("pipe2 failed: {}", std::io::Error::last_os_error());
    }
    let [read_fd, write_fd] = fds;
    WAKE_FD.store(write_fd, Ordering::Release);
    // The thread starts with every signal blocked (it inherits the mask at creation), so a
    // SIGTERM meant for the signal thread's sigwait never lands here.
    // SAFETY: sigset_t is plain data initialised by sigfillset; `old` receives the mask.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sets; only this thread's mask changes, and it is restored below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let started = std::thread::Builder::new()
        .name("crash-symbols".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            // SAFETY: a one-byte read into a one-byte buffer.
            let n = unsafe { libc::read(read_fd, byte.as_mut_ptr().cast(), 1) };
            if n == 1 {
                symbolise();
            }
        })
        .map(drop);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    started.map_err(|e| anyhow::anyhow!("starting the crash symboliser thread: {e}"))
}

/// Writes the handed-over frames with function, file and line (on the symboliser thread).
fn symbolise() {
    use std::fmt::Write;
    let mut text = String::from("strand: backtrace:\n");
    let count = FRAME_COUNT.load(Ordering::Acquire).min(RAW_FRAMES_MAX);
    for (i, frame) in FRAMES.iter().take(count).enumerate() {
        let ip = frame.load(Ordering::Acquire);
        let mut named = false;
        backtrace::resolve(ip as *mut c_void, |sym| {
            named = true;
            let name = sym
                .name()
                .map_or_else(|| "?".to_string(), |n| format!("{n:#}"));
            let _ = writeln!(text, "{i:4}: {name}");
            if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
                let _ = writeln!(text, "          at {}:{line}", file.display());
            }
        });
        if !named {
            let _ = writeln!(text, "{i:4}: {ip:#x}");
        }
    }
    text.push_str("strand: end of crash report\n");
    for fd in [libc::STDERR_FILENO, REPORT_FD.load(Ordering::Acquire)] {
        if fd >= 0 {
            write_all(fd, text.as_bytes());
        }
    }
    SYMBOLISED.store(true, Ordering::Release);
}

extern "C" fn on_fatal_signal(sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    if REPORTING.swap(true, Ordering::AcqRel) {
        // Another thread is reporting its crash and will end the process; wait for it.
        loop {
            // SAFETY: pause only suspends this thread.
            unsafe { libc::pause() };
        }
    }
    // SAFETY: open with a valid NUL-terminated path; -1 on failure, which writes skip.
    let report_fd = REPORT_PATH.get().map_or(-1, |p| unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o640,
        )
    });
    REPORT_FD.store(report_fd, Ordering::Release);
    let fds = [libc::STDERR_FILENO, report_fd];
    header(sig, info).write_to(&fds);
    let mut frames = [std::ptr::null_mut::<c_void>(); RAW_FRAMES_MAX];
    // SAFETY: the buffer holds RAW_FRAMES_MAX pointers.
    let n = unsafe { backtrace(frames.as_mut_ptr(), RAW_FRAMES_MAX as c_int) };
    for &fd in fds.iter().filter(|&&fd| fd >= 0) {
        // SAFETY: `frames` holds `n` entries filled by backtrace.
        unsafe { backtrace_symbols_fd(frames.as_ptr(), n, fd) };
    }
    let n = usize::try_from(n).unwrap_or(0).min(RAW_FRAMES_MAX);
    for (slot, frame) in FRAMES.iter().zip(&frames[..n]) {
        slot.store(*frame as usize, Ordering::Release);
    }
    FRAME_COUNT.store(n, Ordering::Release);
    wait_for_symbols();
    if report_fd >= 0 {
        // SAFETY: fsync and close of a descriptor we opened.
        unsafe {
            libc::fsync(report_fd);
            libc::close(report_fd);
        }
    }
    die_of(sig);
}

/// The report's first lines: signal, cause, thread.
fn header(sig: c_int, info: *mut libc::siginfo_t) -> Line {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (addr, code) = unsafe { ((*info).si_addr() as usize as u64, (*info).si_code) };
    let mut name = [0u8; 17];
    let mut line = Line::new();
    line.text(b"strand: fatal signal ")
        .text(signal_name(sig).as_bytes());
    if code > 0 {
        // Raised by the kernel for this thread's own fault: the address means something.
        line.text(b" (fault address 0x").num(addr, 16).text(b")");
    } else {
        line.text(b" (sent by a process, not a fault)");
    }
    line.text(b" on thread ")
        .text(thread_name(&mut name))
        .text(b" (tid ")
        // SAFETY: gettid has no preconditions.
        .num(unsafe { libc::gettid() } as u64, 10)
        .text(b"); the process dies of it after this report\nstrand: raw frames:\n");
    line
}

/// Wakes the symboliser and waits for it, at most `SYMBOLISE_TIMEOUT_S`.
fn wait_for_symbols() {
    let wake = WAKE_FD.load(Ordering::Acquire);
    // SAFETY: a one-byte write from a one-byte buffer.
    if wake < 0 || unsafe { libc::write(wake, [1u8].as_ptr().cast(), 1) } != 1 {
        return;
    }
    let tick = libc::timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    for _ in 0..SYMBOLISE_TIMEOUT_S * 100 {
        if SYMBOLISED.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: a valid timespec; the remainder is not wanted.
        unsafe { libc::nanosleep(&tick, std::ptr::null_mut()) };
    }
    Line::new()
        .text(b"strand: symbolising the backtrace timed out\n")
        .write_to(&[libc::STDERR_FILENO]);
}

/// Ends the process with `sig` under its default action (core dump where enabled).
fn die_of(sig: c_int) -> ! {
    // SAFETY: signal, sigprocmask and raise are async-signal-safe; the set is initialised.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
        // A blocked or ignored signal could not kill: abort, then exit, as the last resort.
        libc::signal(libc::SIGABRT, libc::SIG_DFL);
        libc::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_its_signal() {
        let r = "strand: fatal signal SIGSEGV (fault address 0x30) on thread shard-0-1 (tid 9)\n";
        assert_eq!(signal_named_in(r).as_deref(), Some("SIGSEGV"));
        assert_eq!(signal_named_in("garbage\n"), None);
        assert_eq!(signal_named_in(""), None);
    }

    #[test]
    fn the_previous_exit_is_read_from_the_marker_and_the_report() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_previous(dir.path()), PreviousExit::default());
        std::fs::write(dir.path().join(RUNNING_MARKER_FILE), "pid 1\n").expect("marker");
        assert_eq!(
            read_previous(dir.path()),
            PreviousExit {
                unclean: true,
                signal: None
            }
        );
        std::fs::write(
            dir.path().join(CRASH_REPORT_FILE),
            "strand: fatal signal SIGBUS (fault address 0x0) on thread x (tid 1)\n",
        )
        .expect("report");
        let p = read_previous(dir.path());
        assert_eq!(p.signal.as_deref(), Some("SIGBUS"));
        assert!(p.unclean);
        // The report is moved aside once read.
        assert!(!dir.path().join(CRASH_REPORT_FILE).exists());
        assert!(dir.path().join(CRASH_REPORT_PREV_FILE).exists());
    }

    #[test]
    fn lines_format_numbers_without_allocating() {
        let mut l = Line::new();
        l.text(b"a ")
            .num(0, 10)
            .text(b" ")
            .num(48, 16)
            .text(b" ")
            .num(u64::MAX, 10);
        assert_eq!(&l.buf[..l.len], b"a 0 30 18446744073709551615");
    }
}
