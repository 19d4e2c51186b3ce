// Unless explicitly stated otherwise all files in this repository are licensed
// under the MIT/Apache-2.0 License, at your convenience
//
// This product includes software developed at Datadog (https://www.datadoghq.com/). Copyright 2020 Datadog, Inc.
//
// Buffers that are friendly to be used with O_DIRECT files.
// For the time being they are really only properly aligned,
// but in the near future they can be coming from memory-areas
// that are pre-registered for I/O uring.

use std::ptr;

use crate::sys::uring::UringBuffer;
use alloc::alloc::Layout;

#[derive(Debug)]
pub(crate) struct SysAlloc {
    data: ptr::NonNull<u8>,
    layout: Layout,
}

/// strand patch: heap buffers of `LARGE_MIN_BYTES..=LARGE_BYTES` (the reads of fetch and
/// read-ahead windows of about 1 MiB) are one size class of `LARGE_BYTES`, aligned to it
/// and advised as transparent huge pages, and kept for reuse in a per-thread pool of at
/// most `LARGE_POOL_MAX`: a read lands in memory already mapped (no page faults, no
/// zeroing, per read) and physically contiguous when the kernel gave a huge page, so the
/// block layer sends it to the device as one request instead of two or more (a virtio disk
/// takes 254 segments, 1016 KiB of 4 KiB pages, per request).
const LARGE_BYTES: usize = 2 << 20;
/// The smallest size in the large class (at most half of the buffer goes unused).
const LARGE_MIN_BYTES: usize = 1 << 20;
/// Large buffers a thread keeps for reuse (32 MiB: what a shard's read-aheads hold at most).
const LARGE_POOL_MAX: usize = 16;

/// A thread's free large buffers (a buffer freed on another thread joins that one's);
/// released when the thread ends.
struct LargePool(Vec<ptr::NonNull<u8>>);

impl Drop for LargePool {
    fn drop(&mut self) {
        for p in self.0.drain(..) {
            // SAFETY: allocated by `SysAlloc::new` with `large_layout()`, owned by the pool.
            unsafe { alloc::alloc::dealloc(p.as_ptr(), large_layout()) };
        }
    }
}

thread_local! {
    static LARGE_POOL: std::cell::RefCell<LargePool> =
        const { std::cell::RefCell::new(LargePool(Vec::new())) };
}

/// strand patch: the bytes of memory a heap buffer of `size` bytes occupies (its size
/// class), for callers that bound the memory their reads hold.
pub fn heap_buffer_bytes(size: usize) -> usize {
    if (LARGE_MIN_BYTES..=LARGE_BYTES).contains(&size) {
        LARGE_BYTES
    } else {
        size.next_multiple_of(4096)
    }
}

fn large_layout() -> Layout {
    Layout::from_size_align(LARGE_BYTES, LARGE_BYTES).expect("a power of two")
}

impl SysAlloc {
    fn new(size: usize) -> Option<Self> {
        if size == 0 {
            None
        } else if (LARGE_MIN_BYTES..=LARGE_BYTES).contains(&size) {
            let layout = large_layout();
            let pooled = LARGE_POOL
                .try_with(|p| p.borrow_mut().0.pop())
                .ok()
                .flatten();
            let data = match pooled {
                Some(p) => p,
                None => {
                    // SAFETY: a non-zero size.
                    let data = ptr::NonNull::new(unsafe { alloc::alloc::alloc(layout) })?;
                    // SAFETY: the range is this allocation; the advice changes no contents
                    // (and is only a hint: without huge pages the buffer is as before).
                    unsafe {
                        libc::madvise(data.as_ptr().cast(), LARGE_BYTES, libc::MADV_HUGEPAGE)
                    };
                    data
                }
            };
            Some(SysAlloc { data, layout })
        } else {
            let layout = Layout::from_size_align(size, 4096).unwrap();
            let data = unsafe { alloc::alloc::alloc(layout) };
            let data = ptr::NonNull::new(data)?;
            Some(SysAlloc { data, layout })
        }
    }

    fn as_ptr(&self) -> *const u8 {
        self.data.as_ptr()
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.data.as_ptr()
    }
}

impl Drop for SysAlloc {
    fn drop(&mut self) {
        if self.layout == large_layout() {
            let data = self.data;
            let kept = LARGE_POOL
                .try_with(|p| {
                    let mut p = p.borrow_mut();
                    let room = p.0.len() < LARGE_POOL_MAX;
                    if room {
                        p.0.push(data);
                    }
                    room
                })
                .unwrap_or(false);
            if kept {
                return;
            }
        }
        unsafe {
            alloc::alloc::dealloc(self.data.as_ptr(), self.layout);
        }
    }
}

#[derive(Debug)]
pub(crate) enum BufferStorage {
    Sys(SysAlloc),
    Uring(UringBuffer),
    EventFd(*mut u8),
    /// strand patch: memory the caller owns (see `DmaBuffer::from_foreign`), kept alive by
    /// `_keep` until the buffer drops.
    Foreign(*mut u8, Box<dyn std::any::Any>),
}

impl BufferStorage {
    fn as_ptr(&self) -> *const u8 {
        match self {
            BufferStorage::Sys(x) => x.as_ptr(),
            BufferStorage::Uring(x) => x.as_ptr(),
            BufferStorage::EventFd(x) => *x as *const u8,
            BufferStorage::Foreign(x, _) => *x as *const u8,
        }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            BufferStorage::Sys(x) => x.as_mut_ptr(),
            BufferStorage::Uring(x) => x.as_mut_ptr(),
            BufferStorage::EventFd(x) => *x,
            BufferStorage::Foreign(x, _) => *x,
        }
    }
}

#[derive(Debug)]
/// A buffer suitable for Direct I/O over io_uring
///
/// Direct I/O has strict requirements about alignment. On top of that, io_uring
/// places additional restrictions on memory placement if we are to use advanced
/// features like registered buffers.
///
/// The `DmaBuffer` is a buffer that adheres to those properties making it
/// suitable for io_uring's Direct I/O.
pub struct DmaBuffer {
    storage: BufferStorage,
    // Invariant: trim + size are at most one byte past the original allocation.
    trim: usize,
    size: usize,
}

impl DmaBuffer {
    pub(crate) fn new(size: usize) -> Option<DmaBuffer> {
        Some(DmaBuffer {
            storage: BufferStorage::Sys(SysAlloc::new(size)?),
            size,
            trim: 0,
        })
    }

    /// strand patch: a buffer over `len` bytes at `ptr` that the caller owns, for writing
    /// from where the bytes already are; `keep` holds the memory and drops with the buffer.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must stay valid for reads until `keep` drops, and nothing may
    /// write it through this buffer (`as_bytes_mut`, `as_mut_ptr`): a write source only.
    /// For an O_DIRECT file, `ptr` and `len` must meet the file's alignment.
    pub unsafe fn from_foreign(ptr: *mut u8, len: usize, keep: Box<dyn std::any::Any>) -> DmaBuffer {
        DmaBuffer {
            storage: BufferStorage::Foreign(ptr, keep),
            size: len,
            trim: 0,
        }
    }

    pub(crate) fn with_storage(size: usize, storage: BufferStorage) -> DmaBuffer {
        DmaBuffer {
            storage,
            size,
            trim: 0,
        }
    }

    pub(crate) fn uring_buffer_id(&self) -> Option<u32> {
        match &self.storage {
            BufferStorage::Uring(x) => x.uring_buffer_id(),
            _ => None,
        }
    }

    /// Reduce the length of this buffer to be `newsize`. This value must be <= the current
    /// [`len`](#method.len) and is a destructive operation (length cannot be increased).
    /// NOTE: When using this with DmaFile, you have to make sure that `newsize` is properly
    /// aligned or the write will fail due to O_DIRECT requirements.
    pub fn trim_to_size(&mut self, newsize: usize) {
        assert!(newsize <= self.size);
        self.size = newsize;
    }

    /// Returns a representation of the current addressable contents of this
    /// `DmaBuffer` as a byte slice
    pub fn as_bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.size) }
    }

    /// Returns a representation of the current addressable contents of this
    /// `DmaBuffer` as a mutable byte slice
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.size) }
    }

    /// Returns the current number of bytes present in the addressable contents
    /// of this `DmaBuffer`
    pub fn len(&self) -> usize {
        self.size
    }

    /// Indicates whether this buffer is empty. An empty buffer can be,
    /// for instance, the result of a read past the end of a file.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Returns a representation of the current addressable contents of this
    /// `DmaBuffer` as mutable pointer
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        unsafe { self.storage.as_mut_ptr().add(self.trim) }
    }

    /// Returns a representation of the current addressable contents of this
    /// `DmaBuffer` as pointer
    pub fn as_ptr(&self) -> *const u8 {
        unsafe { self.storage.as_ptr().add(self.trim) }
    }
}

/// strand patch: the heap memory of a read buffer, taken out of its `DmaBuffer` by
/// [`crate::io::ReadResult::into_heap`]: the `start..start + len` bytes the read returned.
///
/// It is `Send` and `Sync`: it owns an ordinary heap allocation (not the executor's
/// registered pool, whose buffers belong to their ring), the kernel finished writing it
/// before it was taken, and after that it is only read.
#[derive(Debug)]
pub struct HeapBuffer {
    alloc: SysAlloc,
    start: usize,
    len: usize,
}

// SAFETY: see the type's documentation: an owned, completed, read-only heap allocation.
unsafe impl Send for HeapBuffer {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for HeapBuffer {}

impl AsRef<[u8]> for HeapBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start..start + len` lies within the allocation (checked when taken).
        unsafe { std::slice::from_raw_parts(self.alloc.as_ptr().add(self.start), self.len) }
    }
}

impl DmaBuffer {
    /// strand patch: the bytes at `ptr..ptr + len` of this buffer as a [`HeapBuffer`], when
    /// the buffer is heap memory and the range lies within it; the buffer back otherwise.
    pub(crate) fn into_heap(self, ptr: *const u8, len: usize) -> Result<HeapBuffer, DmaBuffer> {
        let base = self.as_ptr() as usize;
        let at = (ptr as usize).wrapping_sub(base);
        let within = (ptr as usize) >= base && at.checked_add(len).is_some_and(|e| e <= self.size);
        match self.storage {
            BufferStorage::Sys(alloc) if within => Ok(HeapBuffer {
                alloc,
                start: self.trim + at,
                len,
            }),
            storage => Err(DmaBuffer {
                storage,
                trim: self.trim,
                size: self.size,
            }),
        }
    }
}

impl AsRef<[u8]> for DmaBuffer {
    #[inline(always)]
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsMut<[u8]> for DmaBuffer {
    #[inline(always)]
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_bytes_mut()
    }
}
