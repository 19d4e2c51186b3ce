//! SIGTERM/SIGINT handling: blocked in every thread (the mask is inherited by the shard
//! threads) and awaited synchronously by the main thread.

use anyhow::bail;

/// The blocked signal set.
pub struct Mask(libc::sigset_t);

/// Blocks SIGTERM and SIGINT in this thread and the threads it creates later.
pub fn block_termination_signals() -> anyhow::Result<Mask> {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; these calls only modify it and the thread mask.
    let rc = unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        bail!("pthread_sigmask failed: {rc}");
    }
    Ok(Mask(set))
}

/// Waits for SIGTERM or SIGINT; returns its name.
pub fn wait(mask: &Mask) -> &'static str {
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: the mask is valid and `sig` is a valid out-parameter.
        let rc = unsafe { libc::sigwait(&mask.0, &mut sig) };
        if rc == 0 {
            return if sig == libc::SIGINT {
                "SIGINT"
            } else {
                "SIGTERM"
            };
        }
    }
}
