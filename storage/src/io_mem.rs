//! Aligned memory that a segment's unflushed frames are built in, handed out from and
//! written to disk from (`tail_buf`): the one place, with `io`, that holds the `unsafe`
//! this takes (STYLE.md 7).
//!
//! Invariant: an [`AppendMem`]'s bytes below its `handed_out` mark never change — appends
//! go at the `written` mark (at or past it), patches only touch bytes not handed out yet —
//! so a `Bytes` handed out of them ([`AppendMem::bytes`]) stays what it was. Bytes from
//! `written` to `init` are zeros (or bytes appended since); nothing reads past `init` (the
//! allocation starts uninitialized).
//!
//! Freed memory of the common sizes goes to a bounded per-thread pool and is reused
//! (`Pool`): tails allocate and the batch cache frees a chunk every few appends, and
//! aligned allocations made and freed at that rate through the C allocator fragmented
//! its heap (with 2,000 partitions under load, 90 MB of freed memory it kept and could
//! not return).

use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

use crate::io::{align_up, WRITE_ALIGN_BYTES};

/// An owned heap allocation aligned to `WRITE_ALIGN_BYTES`, freed by its last holder.
struct Raw {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: it owns its allocation; the `AppendMem` invariant keeps every byte any other
// holder reads unchanged.
unsafe impl Send for Raw {}
// SAFETY: as above.
unsafe impl Sync for Raw {}

impl Drop for Raw {
    fn drop(&mut self) {
        let (ptr, layout) = (self.ptr, self.layout);
        let kept = POOL
            .try_with(|p| p.borrow_mut().put(ptr, layout.size()))
            .unwrap_or(false);
        if !kept {
            // SAFETY: allocated with this layout (`alloc_raw`); dropped once.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
        }
    }
}

/// Sizes the pool keeps: powers of two from one block to this.
const POOLED_BYTES_MAX: usize = 256 * 1024;
/// Most bytes of freed memory a thread's pool keeps.
const POOL_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Pooled size classes: one block, two, four, ... `POOLED_BYTES_MAX`.
const POOL_CLASSES: usize = (POOLED_BYTES_MAX / WRITE_ALIGN_BYTES as usize).ilog2() as usize + 1;

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// A thread's freed allocations of the pooled sizes, at most `POOL_BYTES_MAX` of them.
/// Memory freed on one thread (a fetch answer dropped on another shard) joins that
/// thread's pool; it is just memory.
#[derive(Default)]
struct Pool {
    free: [Vec<NonNull<u8>>; POOL_CLASSES],
    bytes: usize,
}

/// The pool class of an allocation of `size` bytes, if it is a pooled size.
fn pool_class(size: usize) -> Option<usize> {
    let blocks = size / WRITE_ALIGN_BYTES as usize;
    (size % WRITE_ALIGN_BYTES as usize == 0 && blocks.is_power_of_two())
        .then(|| blocks.ilog2() as usize)
        .filter(|&c| c < POOL_CLASSES)
}

/// The size to allocate for at least `cap_bytes`: a pooled size when one is large enough.
fn alloc_size(cap_bytes: usize) -> usize {
    let cap = usize::try_from(align_up(cap_bytes.max(1) as u64)).unwrap_or(usize::MAX);
    if cap <= POOLED_BYTES_MAX {
        cap.next_power_of_two()
    } else {
        cap
    }
}

impl Pool {
    /// Keeps `ptr` (an allocation of `size` bytes) when it is a pooled size and there is
    /// room; false when the caller is to free it.
    fn put(&mut self, ptr: NonNull<u8>, size: usize) -> bool {
        match pool_class(size) {
            Some(c) if self.bytes + size <= POOL_BYTES_MAX => {
                self.free[c].push(ptr);
                self.bytes += size;
                true
            }
            _ => false,
        }
    }

    /// A kept allocation of `size` bytes, if any.
    fn take(&mut self, size: usize) -> Option<NonNull<u8>> {
        let ptr = self.free[pool_class(size)?].pop()?;
        self.bytes -= size;
        Some(ptr)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (c, ptrs) in self.free.iter().enumerate() {
            let layout = layout_of(WRITE_ALIGN_BYTES as usize * (1 << c));
            for ptr in ptrs {
                // SAFETY: allocated with this layout (`alloc_raw`) and owned by the pool.
                unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
            }
        }
    }
}

/// The layout of an allocation of `size` bytes (a multiple of the alignment).
fn layout_of(size: usize) -> Layout {
    Layout::from_size_align(size, WRITE_ALIGN_BYTES as usize)
        .expect("a tail allocation is far below isize::MAX")
}

/// Aligned memory of at least `cap_bytes` (at least one block), from the pool when it has
/// some of that size.
fn alloc_raw(cap_bytes: usize) -> Raw {
    let layout = layout_of(alloc_size(cap_bytes));
    let pooled = POOL
        .try_with(|p| p.borrow_mut().take(layout.size()))
        .ok()
        .flatten();
    let ptr = pooled.unwrap_or_else(|| {
        // SAFETY: the layout's size is nonzero.
        let ptr = unsafe { std::alloc::alloc(layout) };
        NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
    });
    Raw { ptr, layout }
}

impl Raw {
    /// The bytes `range`.
    ///
    /// # Safety
    ///
    /// `range` must lie within the allocation and be initialized, and nothing may write
    /// it while the result is alive.
    unsafe fn slice(&self, range: Range<usize>) -> &[u8] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(range.start), range.len()) }
    }
}

/// Append-only aligned memory (see the module's invariant).
pub struct AppendMem {
    raw: Arc<Raw>,
    /// Bytes that may be held by others (`bytes`): `[0, handed_out)`, never changed again.
    handed_out: Cell<usize>,
    /// Bytes written: `[0, written)`, `written >= handed_out`.
    written: usize,
    /// Bytes initialized: `[0, init)`, `init >= written`.
    init: usize,
}

impl std::fmt::Debug for AppendMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AppendMem({} of {} bytes)", self.written, self.cap())
    }
}

impl AppendMem {
    /// Room for at least `cap_bytes` (rounded up to the alignment, at least one block; up
    /// to `POOLED_BYTES_MAX`, to a power of two).
    pub fn new(cap_bytes: usize) -> AppendMem {
        AppendMem {
            raw: Arc::new(alloc_raw(cap_bytes)),
            handed_out: Cell::new(0),
            written: 0,
            init: 0,
        }
    }

    /// Bytes it can hold.
    pub fn cap(&self) -> usize {
        self.raw.layout.size()
    }

    /// Identifies this memory while it or any slice of it is alive (its address).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.raw) as usize
    }

    /// Bytes written.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Room left.
    pub fn room(&self) -> usize {
        self.cap() - self.written
    }

    /// Appends a copy of `src` at the mark; returns where it is.
    ///
    /// # Panics
    ///
    /// When `src` is longer than the room left.
    pub fn append_copy(&mut self, src: &[u8]) -> Range<usize> {
        assert!(
            src.len() <= self.room(),
            "append of {} bytes into {} left",
            src.len(),
            self.room()
        );
        let range = self.written..self.written + src.len();
        // SAFETY: within the allocation (asserted) and at the mark, past everything handed
        // out, so no other reference to these bytes exists; `src` is another allocation's
        // (it is borrowed while `&mut self` is held).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.raw.ptr.as_ptr().add(range.start),
                src.len(),
            );
        }
        self.written = range.end;
        self.init = self.init.max(self.written);
        range
    }

    /// Written bytes `range` that were not handed out yet, to change in place.
    pub fn patch(&mut self, range: Range<usize>) -> &mut [u8] {
        assert!(
            range.start >= self.handed_out.get()
                && range.start <= range.end
                && range.end <= self.written,
            "patch of {range:?} (handed out {}, written {})",
            self.handed_out.get(),
            self.written
        );
        // SAFETY: written (initialized) bytes within the allocation that nobody else holds
        // (not handed out); `&mut self` keeps this reference unique.
        unsafe {
            std::slice::from_raw_parts_mut(self.raw.ptr.as_ptr().add(range.start), range.len())
        }
    }

    /// Makes `[0, end)` initialized: zeros after what was initialized before.
    pub fn zero_to(&mut self, end: usize) {
        assert!(end <= self.cap(), "zeroing past the memory: {end}");
        if end <= self.init {
            return;
        }
        let from = self.init.max(self.written);
        debug_assert!(from >= self.handed_out.get());
        // SAFETY: within the allocation and at or past the mark (never handed out), with
        // `&mut self` unique.
        unsafe { std::ptr::write_bytes(self.raw.ptr.as_ptr().add(from), 0, end - from) };
        self.init = end;
    }

    /// Written bytes `range`, to read.
    pub fn read(&self, range: Range<usize>) -> &[u8] {
        assert!(
            range.start <= range.end && range.end <= self.written,
            "read of {range:?}"
        );
        // SAFETY: written bytes (initialized, within), which never change.
        unsafe { self.raw.slice(range) }
    }

    /// Written bytes `range` as a `Bytes` sharing this memory; they never change after.
    pub fn bytes(&self, range: Range<usize>) -> Bytes {
        assert!(
            range.start <= range.end && range.end <= self.written,
            "slice {range:?}"
        );
        self.handed_out.set(self.handed_out.get().max(range.end));
        Bytes::from_owner(MemSlice {
            raw: Arc::clone(&self.raw),
            range,
        })
    }

    /// Initialized bytes `range` (written ones, and zeros or later writes after them) as
    /// the source of a write to disk.
    pub fn write_source(&self, range: Range<usize>) -> WriteSource {
        assert!(
            range.start <= range.end && range.end <= self.init,
            "write of {range:?}"
        );
        WriteSource {
            raw: Arc::clone(&self.raw),
            range,
        }
    }
}

/// A handed-out range of written bytes.
struct MemSlice {
    raw: Arc<Raw>,
    range: Range<usize>,
}

impl AsRef<[u8]> for MemSlice {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: written bytes, which never change (the module's invariant).
        unsafe { self.raw.slice(self.range.clone()) }
    }
}

/// Bytes of an [`AppendMem`] to write to disk from where they are. Past the written mark
/// they may change under the write (an append during a flush): the caller writes them
/// only as padding past the data it makes durable.
pub struct WriteSource {
    raw: Arc<Raw>,
    range: Range<usize>,
}

impl WriteSource {
    /// Bytes to write.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// The bytes, for a write that completes before anything else runs on this thread
    /// (the simulated disk).
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: initialized (checked when made); the tail's one writer runs on this
        // thread, not while this synchronous write reads them.
        unsafe { self.raw.slice(self.range.clone()) }
    }

    /// The bytes as a glommio write source that holds the memory until the write is done.
    pub(crate) fn into_dma_buffer(self) -> glommio::io::DmaBuffer {
        // SAFETY: within the allocation and initialized (checked when made), kept alive by
        // the boxed `Arc` for as long as the buffer; glommio only reads a write source.
        // Bytes past the written mark may be written by an append meanwhile; the kernel
        // reads them as they are then (see `WriteSource`).
        unsafe {
            glommio::io::DmaBuffer::from_foreign(
                self.raw.ptr.as_ptr().add(self.range.start),
                self.range.len(),
                Box::new(self.raw),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_memory_of_pooled_sizes_is_reused_within_a_bound() {
        // A thread of its own: an empty pool.
        std::thread::spawn(|| {
            let pooled = || POOL.with(|p| p.borrow().bytes);
            assert_eq!(AppendMem::new(5000).cap(), 8192);
            assert_eq!(AppendMem::new(300 * 1024).cap(), 300 * 1024);
            assert_eq!(pooled(), 8192, "the 300 KiB allocation is not pooled");
            let a = AppendMem::new(8192);
            let ptr = a.raw.ptr;
            let frame = a.bytes(0..0);
            drop(a);
            assert_eq!(pooled(), 0, "taken from the pool");
            drop(frame);
            assert_eq!(pooled(), 8192, "back when its last holder is gone");
            assert_eq!(AppendMem::new(6000).raw.ptr, ptr, "reused");
            let many: Vec<_> = (0..40).map(|_| AppendMem::new(256 * 1024)).collect();
            drop(many);
            assert!(pooled() <= POOL_BYTES_MAX);
            assert!(pooled() > POOL_BYTES_MAX - 256 * 1024);
        })
        .join()
        .expect("the pool's thread");
    }

    #[test]
    fn handed_out_bytes_stay_and_later_ones_can_be_patched() {
        let mut m = AppendMem::new(100);
        assert_eq!(m.cap(), WRITE_ALIGN_BYTES as usize);
        let a = m.append_copy(b"hello");
        let b = m.append_copy(b"world");
        m.patch(b.clone()).copy_from_slice(b"WORLD");
        let held = m.bytes(a.start..b.end);
        m.append_copy(b"!");
        m.zero_to(64);
        assert_eq!(&held[..], b"helloWORLD");
        assert_eq!(m.read(0..11), b"helloWORLD!");
        let src = m.write_source(0..64);
        assert_eq!(&src.as_slice()[..11], b"helloWORLD!");
        assert!(src.as_slice()[11..].iter().all(|&x| x == 0));
        let moved = std::thread::spawn(move || held.len())
            .join()
            .expect("thread");
        assert_eq!(moved, 10, "handed-out bytes cross threads");
    }

    #[test]
    #[should_panic(expected = "patch of")]
    fn handed_out_bytes_cannot_be_patched() {
        let mut m = AppendMem::new(10);
        let a = m.append_copy(b"abc");
        let _held = m.bytes(a.clone());
        m.patch(a);
    }

    #[test]
    #[should_panic(expected = "write of")]
    fn uninitialized_bytes_are_not_written_out() {
        let mut m = AppendMem::new(10);
        m.append_copy(b"abc");
        let _ = m.write_source(0..4096);
    }
}
