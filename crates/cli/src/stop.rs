//! A stop asked (^C, SIGTERM, SIGHUP) of a command that runs programs or
//! measurements one after another (`advise`, the demo, `bench`): the program running
//! is passed the stop, with the processes it started (it runs in a
//! process group of its own, which the terminal's ^C does not reach:
//! lockmeter passes that on too), bench runs in progress end at once,
//! none other starts, and the command removes its scratch files and dies
//! of the signal, as a shell loop needs to stop. Before, a SIGTERM killed
//! `advise` and left the program it ran going, and a ^C left the demo's
//! build directory behind. A second stop kills the program's group and
//! ends the command there and then.

use std::sync::atomic::{AtomicI32, Ordering};

/// The stop that came, 0 if none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The program running, 0 if none.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(signal: libc::c_int) {
    // The interrupted code's errno, kept across the calls below.
    // SAFETY: __errno_location gives this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let child = CHILD.load(Ordering::SeqCst);
    if SIGNAL.load(Ordering::SeqCst) != 0 {
        // The program and its group go with it: a program that ignores
        // the first stop was left running (re-parented to init, still
        // writing into lockmeter's scratch directory).
        pass_on(child, libc::SIGKILL);
        die_of(signal);
    }
    SIGNAL.store(signal, Ordering::SeqCst);
    lockmeter_bench::interrupt::request(signal);
    pass_on(child, signal);
    if child > 0 {
        // Said, so that a program slow to stop is not read as a hang.
        const WAITING: &[u8] = b"\nlockmeter: stopping: waiting for the program to end (stop again to kill it)\n";
        // SAFETY: write(2) is async-signal-safe; the message is static.
        unsafe { libc::write(2, WAITING.as_ptr().cast(), WAITING.len()) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Sends a stop to the program running and its process group, if one
/// runs (async-signal-safe).
fn pass_on(child: i32, signal: libc::c_int) {
    if child > 0 && signal != 0 {
        // SAFETY: kill(2) is async-signal-safe; the child is not reaped
        // while it is registered, so its pid, and its group's id, are
        // still its own.
        unsafe { libc::kill(-child, signal) };
    }
}

/// Starts `command` as the leader of a process group of its own, which a
/// stop is passed to whole: a program that forks (`sh -c 'sleep 37;
/// true'`) left its children running when its own pid alone was
/// signalled.
pub fn in_own_group(command: &mut std::process::Command) -> &mut std::process::Command {
    std::os::unix::process::CommandExt::process_group(command, 0)
}

/// Catches the stops; one that lockmeter was started ignoring (as under
/// `nohup`) stays ignored. SIGCHLD goes back to its default: started
/// ignoring it, the kernel reaps children itself and every wait failed
/// ('No child processes').
pub fn install() {
    // SAFETY: setting a signal's disposition to its default.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a handler that touches atomics and calls kill and raise
        // (async-signal-safe), for signals not ignored.
        unsafe {
            if libc::signal(signal, libc::SIG_IGN) != libc::SIG_IGN {
                libc::signal(signal, on_stop as *const () as libc::sighandler_t);
            }
        }
    }
}

/// Waits for `child` (started [`in_own_group`]) to end, a stop passed on
/// to its group meanwhile, and reaps it. The wait ends when the child does (a process it left running with
/// its output pipes open makes no difference), at the instant returned
/// with its status.
pub fn wait(child: &mut std::process::Child) -> std::io::Result<(std::process::ExitStatus, std::time::Instant)> {
    wait_until(child, None).map(|(status, ended, _)| (status, ended))
}

/// As [`wait`]; at `deadline`, if it comes first, the child's group is
/// killed (SIGKILL) and the wait goes on to its end: the third value says
/// whether it was.
pub fn wait_until(
    child: &mut std::process::Child,
    deadline: Option<std::time::Instant>,
) -> std::io::Result<(std::process::ExitStatus, std::time::Instant, bool)> {
    let pid = child.id() as i32;
    CHILD.store(pid, Ordering::SeqCst);
    // A stop that came before it started goes to it now.
    pass_on(pid, SIGNAL.load(Ordering::SeqCst));
    let killed = deadline.is_some_and(|deadline| ended_before(pid, deadline));
    let ended = loop {
        // SAFETY: a zeroed siginfo_t is a valid buffer for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child to end, leaving it unreaped
        // (WNOWAIT), so that its pid stays its own until `ended`.
        if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) } == 0 {
            break Ok(std::time::Instant::now());
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            break Err(error);
        }
    };
    CHILD.store(0, Ordering::SeqCst);
    let ended = ended?;
    Ok((child.wait()?, ended, killed))
}

/// Waits for unreaped child `pid` to end until `deadline`, through a
/// descriptor of the process (ready the instant it ends, where a polled
/// wait would add its period to the time measured). At the deadline its
/// group is killed: returns whether it was. (Without process descriptors,
/// before Linux 5.3, there is no deadline.)
fn ended_before(pid: i32, deadline: std::time::Instant) -> bool {
    // SAFETY: pidfd_open of our own child, which is not reaped until the
    // caller's wait: the pid is its own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if fd < 0 {
        return false;
    }
    let killed = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut ready = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // Rounded up: a deadline a fraction of a millisecond away is not
        // reached by a poll of 0 ms.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut ready, 1, ms) } {
            n if n > 0 => break false,
            0 if std::time::Instant::now() >= deadline => {
                // SAFETY: the child is unreaped, so its pid and its group's
                // id are still its own.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                break true;
            }
            0 => {} // early
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {} // a stop, passed on
            _ => break false, // no deadline then: the wait goes on to the end
        }
    };
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(fd) };
    killed
}

/// The stop that came, if one did.
pub fn requested() -> Option<libc::c_int> {
    Some(SIGNAL.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// Ends lockmeter by `signal`'s default action.
pub fn die_of(signal: libc::c_int) {
    // SAFETY: resetting a disposition and raising a signal, both
    // async-signal-safe.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}
