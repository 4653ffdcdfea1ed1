//! Reading memory-mapped files that may shrink under the process: a SIGBUS becomes a flag.
//!
//! A page of a shared file mapping that lies past the file's end once another process truncated
//! the file (`truncate`, `rsync --inplace`, a copy over it, a full disk) raises SIGBUS when it is
//! touched, and the default action kills the process without a word. A [`Guard`] marks the
//! address range the current thread is reading; the process-wide handler ([`install`], once)
//! answers a SIGBUS whose address lies in the faulting thread's guarded range by mapping a zero
//! page over the faulting page, so the read completes (with zeros), and raises the guard's flag,
//! which the reader checks ([`Guard::faulted`]) before it trusts what it read. Any other SIGBUS
//! goes to the handler that was installed before (or to the default action: the process dies
//! as it would have). A check of the file's size before the read cannot do this: the file can
//! shrink between the check and the read.
//!
//! The handler only touches atomics, `gettid` and `mmap` (plain system calls): nothing that
//! allocates or locks. Linux only; elsewhere a guard covers nothing.

/// A thread's guarded range, claimed by a [`Guard`] for the length of one read.
#[cfg(target_os = "linux")]
struct Slot {
    /// Claimed by a live guard.
    busy: std::sync::atomic::AtomicBool,
    /// The owning thread (`gettid`): the handler only answers faults of that thread.
    owner: std::sync::atomic::AtomicI64,
    /// The guarded range `[start, end)`; empty when nothing is covered.
    start: std::sync::atomic::AtomicUsize,
    end: std::sync::atomic::AtomicUsize,
    /// A SIGBUS in the range was answered with a zero page.
    faulted: std::sync::atomic::AtomicBool,
}

#[cfg(target_os = "linux")]
mod imp {
    use super::Slot;
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
    use std::sync::OnceLock;

    /// Readers guarded at once (one per reading thread); a read finding none free is not done.
    const SLOTS: usize = 64;

    pub(super) static TABLE: [Slot; SLOTS] = [const {
        Slot {
            busy: AtomicBool::new(false),
            owner: AtomicI64::new(0),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            faulted: AtomicBool::new(false),
        }
    }; SLOTS];

    /// The SIGBUS action before [`install`]'s, which every fault outside a guard goes to.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    static INSTALLED: OnceLock<bool> = OnceLock::new();

    #[allow(clippy::useless_conversion, reason = "c_long is i32 on 32-bit targets")]
    pub(super) fn thread_id() -> i64 {
        // SAFETY: gettid takes no argument and cannot fail.
        i64::from(unsafe { libc::syscall(libc::SYS_gettid) })
    }

    std::thread_local! {
        /// This thread's `gettid`, read once (a system call costs a microsecond on a VM).
        static THREAD_ID: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
    }

    /// [`thread_id`] outside the handler, cached per thread.
    pub(super) fn current_thread_id() -> i64 {
        THREAD_ID.with(|id| {
            if id.get() == 0 {
                id.set(thread_id());
            }
            id.get()
        })
    }

    pub(super) fn install() -> bool {
        *INSTALLED.get_or_init(|| {
            // SAFETY: sysconf and sigaction with valid pointers; the handler is async-signal-safe
            // (atomics and system calls only).
            unsafe {
                let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(0);
                if page == 0 || !page.is_power_of_two() {
                    return false;
                }
                PAGE.store(page, Ordering::Relaxed);
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &raw mut previous) != 0 {
                    return false;
                }
                let _ = PREVIOUS.set(previous);
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&raw mut action.sa_mask);
                libc::sigaction(libc::SIGBUS, &raw const action, std::ptr::null_mut()) == 0
            }
        })
    }

    extern "C" fn on_sigbus(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t.
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        if code > 0 && answer(addr) {
            return;
        }
        forward(signal, code, info, context);
    }

    /// Map a zero page over the faulting page when `addr` is in this thread's guarded range.
    fn answer(addr: usize) -> bool {
        let me = thread_id();
        let Some(slot) = TABLE.iter().find(|s| {
            s.busy.load(Ordering::Acquire)
                && s.owner.load(Ordering::Relaxed) == me
                && s.start.load(Ordering::Relaxed) <= addr
                && addr < s.end.load(Ordering::Relaxed)
        }) else {
            return false;
        };
        let page = PAGE.load(Ordering::Relaxed);
        let base = addr & !(page - 1);
        // SAFETY: the page lies in a live read-only mapping that this thread's guard keeps
        // mapped; replacing it with a private zero page changes only what this mapping reads,
        // and the guard's flag makes the reader drop everything it read from it.
        let mapped = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return false;
        }
        slot.faulted.store(true, Ordering::Release);
        true
    }

    /// Hand a SIGBUS that is not ours to the previous handler, or to the default action.
    fn forward(
        signal: libc::c_int,
        code: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        let previous = PREVIOUS.get();
        let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
        if handler == libc::SIG_IGN && code <= 0 {
            return; // a sent SIGBUS that was ignored before stays ignored
        }
        if let Some(p) = previous.filter(|_| handler != libc::SIG_DFL && handler != libc::SIG_IGN) {
            // SAFETY: the previous action's handler, called with the signature its flags declare.
            unsafe {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(handler);
                    f(signal, info, context);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                    f(signal);
                }
            }
            return;
        }
        // SAFETY: sigaction and raise are async-signal-safe. The default action is restored: a
        // fault repeats on return and a sent signal is raised again, and either ends the process.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &raw const action, std::ptr::null_mut());
            if code <= 0 {
                libc::raise(libc::SIGBUS);
            }
        }
    }
}

/// Install the SIGBUS handler (once per process). Returns whether it is in place.
pub fn install() -> bool {
    #[cfg(target_os = "linux")]
    {
        imp::install()
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// The current thread's guarded range while it reads mapped bytes; released on drop.
pub struct Guard {
    #[cfg(target_os = "linux")]
    slot: &'static Slot,
}

impl Guard {
    /// Claim a guard for the current thread, or `None` when the handler is not installed or
    /// every slot is taken (the caller must then not read a mapping that can shrink).
    pub fn new() -> Option<Self> {
        if !install() {
            return None;
        }
        #[cfg(target_os = "linux")]
        {
            use std::sync::atomic::Ordering;
            let slot = imp::TABLE.iter().find(|s| {
                s.busy
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })?;
            slot.faulted.store(false, Ordering::Relaxed);
            slot.start.store(0, Ordering::Relaxed);
            slot.end.store(0, Ordering::Relaxed);
            slot.owner
                .store(imp::current_thread_id(), Ordering::Release);
            Some(Self { slot })
        }
        #[cfg(not(target_os = "linux"))]
        {
            Some(Self {})
        }
    }

    /// Guard the reads of `bytes` (a mapping) from now on, instead of the previous range.
    pub fn cover(&self, bytes: &[u8]) {
        #[cfg(target_os = "linux")]
        {
            use std::sync::atomic::Ordering;
            let start = bytes.as_ptr() as usize;
            // empty first: the handler never sees a range made of two mappings' ends
            self.slot.end.store(0, Ordering::Relaxed);
            self.slot.start.store(start, Ordering::Relaxed);
            self.slot.end.store(start + bytes.len(), Ordering::Relaxed);
            // the reads that follow are not moved before the range is in place
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = bytes;
    }

    /// Whether a read under this guard touched a page past the end of a shrunk file (it read
    /// zeros there; the mapping is no longer the file's content).
    pub fn faulted(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            use std::sync::atomic::Ordering;
            // the reads before are not moved after this load
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            self.slot.faulted.load(Ordering::Acquire)
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        {
            use std::sync::atomic::Ordering;
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            self.slot.end.store(0, Ordering::Relaxed);
            self.slot.start.store(0, Ordering::Relaxed);
            self.slot.busy.store(false, Ordering::Release);
        }
    }
}
