//! Large buffers backed by transparent huge pages where the OS allows it.
//!
//! A fresh multi-MB buffer (e.g. the 8 MB of 1e6 int64 output indices) is otherwise faulted in
//! 4 KiB page by page on first write. Measured on the 2-vCPU VM this project targets, that was
//! ~4000 faults and ~11 ms of kernel time for one `sample_without_replacement(k = 1e6)` call,
//! more than the computation itself. `madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned interior of
//! the buffer (Linux with THP in `madvise` or `always` mode) leaves one fault per 2 MiB there.
//! Purely a performance hint: contents and results are identical either way.

/// Buffers smaller than this are left alone (the saving would not pay for the system call).
const HUGE_THRESHOLD_BYTES: usize = 4 << 20;

/// A `Vec<T>` of length `len` filled with `T::default()`, huge-page advised when large.
///
/// For the integer types used here `vec![0; len]` is a zeroed allocation (`calloc`): fresh
/// pages from the OS are not touched (no memset), so the advice still applies when the kernel
/// writes them first, and no time is spent writing zeros that are overwritten anyway.
pub fn filled<T: Copy + Default>(len: usize) -> Vec<T> {
    let v: Vec<T> = vec![T::default(); len];
    advise_huge(&v);
    v
}

/// An empty `Vec<T>` with capacity `len`, huge-page advised when large.
pub fn with_capacity<T>(len: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(len);
    advise_huge(&v);
    v
}

/// A scratch buffer (never handed to Python) aligned to 2 MiB, so that all of it, not just the
/// aligned interior, can be backed by huge pages.
pub struct Scratch<T: Copy> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: `Scratch` owns its allocation exclusively, like a `Vec<T>`.
unsafe impl<T: Copy + Send> Send for Scratch<T> {}
// SAFETY: shared access only hands out `&[T]`, like a `Vec<T>`.
unsafe impl<T: Copy + Sync> Sync for Scratch<T> {}

impl<T: Copy> Scratch<T> {
    /// `len` copies of `value`; falls back to the global allocator's failure handling.
    pub fn filled(len: usize, value: T) -> Self {
        const HUGE: usize = 2 << 20;
        // Never zero (a zero-size allocation is not allowed), never wrapped around.
        let size = len.saturating_mul(std::mem::size_of::<T>()).max(1);
        let align = if size >= HUGE_THRESHOLD_BYTES {
            HUGE
        } else {
            std::mem::align_of::<T>()
        };
        let Ok(layout) = std::alloc::Layout::from_size_align(size, align) else {
            // Only an absurd size (beyond isize::MAX) gets here: report it like a failed
            // allocation (abort), never write past a smaller block.
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<T>())
        };
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) }.cast::<T>();
        let Some(ptr) = std::ptr::NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        if align == HUGE {
            advise_range(raw as usize, size);
        }
        for i in 0..len {
            // SAFETY: `i < len` and the allocation holds `len` values of `T`.
            unsafe { ptr.as_ptr().add(i).write(value) };
        }
        Self { ptr, len, layout }
    }
}

impl<T: Copy> std::ops::Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised values live at `ptr` for the lifetime of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for Scratch<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `filled` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast::<u8>(), self.layout) };
    }
}

#[cfg(target_os = "linux")]
fn advise_range(start: usize, bytes: usize) {
    const HUGE: usize = 2 << 20;
    let aligned = start.next_multiple_of(HUGE);
    let end = (start + bytes) / HUGE * HUGE;
    if end > aligned {
        // SAFETY: [aligned, end) lies inside an allocation owned by the caller and is 2 MiB-
        // aligned; MADV_HUGEPAGE only changes how the kernel backs those pages. The return
        // value is ignored on purpose: failure just means 4 KiB pages.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                end - aligned,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_range(_start: usize, _bytes: usize) {}

fn advise_huge<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes >= HUGE_THRESHOLD_BYTES {
        advise_range(v.as_ptr() as usize, bytes);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn filled_is_filled() {
        let v = super::filled::<i64>(3_000_000);
        assert_eq!(v.len(), 3_000_000);
        assert!(v.iter().all(|&x| x == 0));
        let s = super::Scratch::filled(1_000_000, 7u64);
        assert_eq!(s.len(), 1_000_000);
        assert!(s.iter().all(|&x| x == 7));
        let e = super::Scratch::filled(0, 1u8);
        assert!(e.is_empty());
        let w = super::with_capacity::<u32>(10);
        assert!(w.is_empty() && w.capacity() >= 10);
    }
}
