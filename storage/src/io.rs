//! File I/O for segments on glommio DMA files (O_DIRECT, io_uring). The only module of the
//! storage crate, with `io_runtime`, that names glommio (STYLE.md 1).
//!
//! Invariant: every write is `WRITE_ALIGN_BYTES`-aligned in position and length; reads may
//! be unaligned (glommio widens them). Files live on the shard that opened them (`!Send`).
//!
//! While a simulated disk is entered on the thread (`io_sim`, the deterministic
//! simulators), every function here goes to it instead: each begins with `sim()`.

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{DmaFile, OpenOptions};

use crate::error::StorageError;
pub use crate::io_mem::{AppendMem, WriteSource};
use crate::io_sim::{SimDisk, SimFile};

/// The simulated disk entered on this thread, if any (never in production).
fn sim() -> Option<SimDisk> {
    SimDisk::current()
}

/// Alignment of every write: covers 512-byte and 4 KiB logical block devices.
pub const WRITE_ALIGN_BYTES: u64 = 4096;

/// Rounds `v` down to the write alignment.
pub fn align_down(v: u64) -> u64 {
    v & !(WRITE_ALIGN_BYTES - 1)
}

/// Rounds `v` up to the write alignment.
pub fn align_up(v: u64) -> u64 {
    align_down(v + WRITE_ALIGN_BYTES - 1)
}

/// How a failed write or sync should be treated.
#[derive(Debug)]
pub enum IoFault {
    /// ENOSPC / EDQUOT: nothing unflushed is acknowledged; retry later.
    NoSpace,
    /// Anything else.
    Other(io::Error),
}

fn to_io(e: glommio::GlommioError<()>) -> io::Error {
    io::Error::from(e)
}

fn classify(e: io::Error) -> IoFault {
    let enospc = matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded;
    if enospc {
        IoFault::NoSpace
    } else {
        IoFault::Other(e)
    }
}

/// When the writes of a [`SegmentFile`] become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteSync {
    /// After an explicit `fdatasync` (bulk writes: one sync for many).
    Fdatasync,
    /// Each write is durable when it completes (`O_DSYNC`): data and the metadata needed
    /// to read it back, as `fdatasync` after the write would make them. A log's flush is
    /// then one io_uring operation with one completion instead of two in a row.
    EachWrite,
}

/// One open segment (or index) file.
pub struct SegmentFile {
    file: Backend,
    path: PathBuf,
    sync: WriteSync,
}

enum Backend {
    Dma(DmaFile),
    Sim(SimFile),
}

fn open_flags(sync: WriteSync) -> libc::c_int {
    match sync {
        WriteSync::Fdatasync => 0,
        // The simulator's planted bug: the file forgets O_DSYNC (write_durable still
        // trusts it and skips the fdatasync).
        WriteSync::EachWrite if crate::io_sim::planted("drop-dsync") => 0,
        WriteSync::EachWrite => libc::O_DSYNC,
    }
}

/// Opens a segment file on the simulated disk.
fn sim_segment(
    d: &SimDisk,
    path: &Path,
    sync: WriteSync,
    create_new: bool,
) -> Result<SegmentFile, StorageError> {
    let dsync = open_flags(sync) & libc::O_DSYNC != 0;
    let file = d
        .open(path, create_new, create_new, dsync)
        .map_err(|e| StorageError::io(path, e))?;
    Ok(SegmentFile {
        file: Backend::Sim(file),
        path: path.to_path_buf(),
        sync,
    })
}

impl std::fmt::Debug for SegmentFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SegmentFile({})", self.path.display())
    }
}

impl SegmentFile {
    /// Creates a new file (fails if it exists), opened read-write.
    pub async fn create(path: &Path, sync: WriteSync) -> Result<SegmentFile, StorageError> {
        if let Some(d) = sim() {
            return sim_segment(&d, path, sync, true);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(open_flags(sync))
            .dma_open(path)
            .await
            .map_err(|e| StorageError::io(path, to_io(e)))?;
        Ok(SegmentFile {
            file: Backend::Dma(file),
            path: path.to_path_buf(),
            sync,
        })
    }

    /// Opens an existing file read-write.
    pub async fn open(path: &Path, sync: WriteSync) -> Result<SegmentFile, StorageError> {
        if let Some(d) = sim() {
            return sim_segment(&d, path, sync, false);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(open_flags(sync))
            .dma_open(path)
            .await
            .map_err(|e| StorageError::io(path, to_io(e)))?;
        Ok(SegmentFile {
            file: Backend::Dma(file),
            path: path.to_path_buf(),
            sync,
        })
    }

    /// An unnamed file in `dir` (`O_TMPFILE`: no directory entry, gone when closed),
    /// created and made durable once, then never written: its `fdatasync` has no metadata
    /// to commit, so it is only a flush of the device's write cache (`device_flush`'s
    /// rounds use it). `None` on the simulated disk or where the filesystem refuses
    /// `O_TMPFILE`.
    pub async fn clean_anchor(dir: &Path) -> Option<SegmentFile> {
        if sim().is_some() {
            return None;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .tmpfile(true)
            .dma_open(dir)
            .await
            .ok()?;
        let f = SegmentFile {
            file: Backend::Dma(file),
            path: dir.to_path_buf(),
            sync: WriteSync::Fdatasync,
        };
        // Its creation's metadata is committed now, never again.
        f.fdatasync().await.ok()?;
        Some(f)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `data` at `pos`; both must be aligned. Returns on completion (not durable).
    pub async fn write_aligned(&self, pos: u64, data: &[u8]) -> Result<(), IoFault> {
        self.write_with(pos, data.len(), |b| b.copy_from_slice(data))
            .await
    }

    /// Writes `len` zero bytes at `pos` (both aligned), as `write_aligned`.
    pub async fn write_zeros(&self, pos: u64, len: usize) -> Result<(), IoFault> {
        self.write_with(pos, len, |b| b.fill(0)).await
    }

    async fn write_with(
        &self,
        pos: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), IoFault> {
        assert_eq!(pos % WRITE_ALIGN_BYTES, 0, "unaligned write position {pos}");
        assert_eq!(len as u64 % WRITE_ALIGN_BYTES, 0, "unaligned write length");
        let file = match &self.file {
            Backend::Dma(f) => f,
            Backend::Sim(f) => {
                let mut buf = vec![0; len];
                fill(&mut buf);
                return f.write(pos, &buf).map_err(classify);
            }
        };
        let mut buf = file.alloc_dma_buffer(len);
        fill(buf.as_bytes_mut());
        let written = file
            .write_at(buf, pos)
            .await
            .map_err(|e| classify(to_io(e)))?;
        if written != len {
            // A short O_DIRECT write happens when the filesystem runs out of space mid-way.
            return Err(IoFault::NoSpace);
        }
        Ok(())
    }

    /// Writes `len` bytes at `pos` (both aligned), made by `fill` straight into the DMA
    /// buffer, and returns once they are durable: one `O_DSYNC` write, or a write and an
    /// `fdatasync`, as the file was opened.
    pub async fn write_durable(
        &self,
        pos: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), IoFault> {
        self.write_with(pos, len, fill).await?;
        self.sync_after_write().await
    }

    /// Writes `src` at `pos` from where its bytes are (no copy into a DMA buffer) and
    /// returns once they are durable, as [`SegmentFile::write_durable`]. `pos` and the
    /// source's length must be aligned; the write holds the memory until it completes.
    pub async fn write_durable_from(&self, pos: u64, src: WriteSource) -> Result<(), IoFault> {
        self.write_from(pos, src).await?;
        self.sync_after_write().await
    }

    /// Writes `src` at `pos` as [`SegmentFile::write_durable_from`] does, and returns on
    /// completion: durable only on a file opened [`WriteSync::EachWrite`]; otherwise once an
    /// fdatasync (or a device flush, `device_flush`) follows.
    pub async fn write_from(&self, pos: u64, src: WriteSource) -> Result<(), IoFault> {
        assert_eq!(pos % WRITE_ALIGN_BYTES, 0, "unaligned write position {pos}");
        let len = src.len();
        assert_eq!(len as u64 % WRITE_ALIGN_BYTES, 0, "unaligned write length");
        let file = match &self.file {
            Backend::Dma(f) => f,
            Backend::Sim(f) => return f.write(pos, src.as_slice()).map_err(classify),
        };
        let written = file
            .write_at(src.into_dma_buffer(), pos)
            .await
            .map_err(|e| classify(to_io(e)))?;
        if written != len {
            return Err(IoFault::NoSpace);
        }
        Ok(())
    }

    /// Writes `len` bytes made by `fill` at `pos` (both aligned); returns on completion,
    /// durable as [`SegmentFile::write_from`].
    pub async fn write_filled(
        &self,
        pos: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), IoFault> {
        self.write_with(pos, len, fill).await
    }

    /// When this file's writes become durable.
    pub fn sync_mode(&self) -> WriteSync {
        self.sync
    }

    async fn sync_after_write(&self) -> Result<(), IoFault> {
        match self.sync {
            WriteSync::EachWrite => Ok(()),
            WriteSync::Fdatasync => self.fdatasync().await,
        }
    }

    /// `fdatasync`: everything written so far is durable once this returns `Ok`.
    pub async fn fdatasync(&self) -> Result<(), IoFault> {
        match &self.file {
            Backend::Dma(f) => f.fdatasync().await.map_err(|e| classify(to_io(e))),
            Backend::Sim(f) => {
                if f.slow_syncs() {
                    yield_once().await;
                }
                f.fdatasync().map_err(classify)
            }
        }
    }

    /// Reads up to `len` bytes at `pos` (fewer at end of file).
    pub async fn read(&self, pos: u64, len: usize) -> Result<Bytes, StorageError> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let io_err = |e| StorageError::io(&self.path, e);
        match &self.file {
            Backend::Dma(f) => {
                let r = f.read_at(pos, len).await.map_err(|e| io_err(to_io(e)))?;
                // A large read lands in heap memory that becomes the `Bytes` itself (no
                // copy); a small one in the registered pool, copied out.
                Ok(match r.into_heap() {
                    Ok(heap) => Bytes::from_owner(heap),
                    Err(r) => Bytes::copy_from_slice(&r),
                })
            }
            Backend::Sim(f) => Ok(Bytes::from(f.read(pos, len).map_err(io_err)?)),
        }
    }

    /// Begins reading `len` bytes at `pos` in the background (a task of the shard's
    /// executor), for read-ahead; `None` on the simulated disk. A failed read drops the
    /// sender: the reader then reads again itself and gets the error.
    pub(crate) fn prefetch(self: &Rc<Self>, pos: u64, len: usize) -> Option<Prefetch> {
        let Backend::Dma(_) = &self.file else {
            return None;
        };
        let (tx, rx) = futures::channel::oneshot::channel();
        let file = Rc::clone(self);
        glommio::spawn_local(async move {
            if let Ok(bytes) = file.read(pos, len).await {
                let _ = tx.send(bytes);
            }
        })
        .detach();
        Some(rx)
    }

    /// Sets the file size.
    pub async fn truncate(&self, size_bytes: u64) -> Result<(), StorageError> {
        match &self.file {
            Backend::Dma(f) => f.truncate(size_bytes).await.map_err(to_io),
            Backend::Sim(f) => f.set_len(size_bytes),
        }
        .map_err(|e| StorageError::io(&self.path, e))
    }

    /// `fallocate`s the file to at least `size_bytes` (file size grows, contents read zero).
    pub async fn preallocate(&self, size_bytes: u64) -> Result<(), IoFault> {
        match &self.file {
            Backend::Dma(f) => f.pre_allocate(size_bytes, false).await.map_err(to_io),
            Backend::Sim(f) => match f.size_bytes() {
                Ok(size) if size < size_bytes => f.set_len(size_bytes),
                other => other.map(drop),
            },
        }
        .map_err(classify)
    }

    /// Current file size.
    pub async fn size_bytes(&self) -> Result<u64, StorageError> {
        match &self.file {
            Backend::Dma(f) => f.file_size().await.map_err(to_io),
            Backend::Sim(f) => f.size_bytes(),
        }
        .map_err(|e| StorageError::io(&self.path, e))
    }

    /// Closes the file (outstanding `Rc` clones keep their descriptor until dropped).
    pub async fn close(self) -> Result<(), StorageError> {
        let path = self.path;
        match self.file {
            Backend::Dma(f) => f
                .close()
                .await
                .map_err(|e| StorageError::io(path, to_io(e))),
            Backend::Sim(_) => Ok(()),
        }
    }
}

/// Bytes of memory the buffer of a read of `len` bytes occupies: its size class (reads of
/// 1-2 MiB take a 2 MiB buffer, see vendored glommio's `heap_buffer_bytes`).
pub fn read_buffer_bytes(len: usize) -> usize {
    glommio::io::heap_buffer_bytes(len)
}

/// Shared handle to a segment file; reads in flight keep a removed file readable.
pub type SharedFile = Rc<SegmentFile>;

/// The bytes of a read begun ahead of its reader ([`SegmentFile::prefetch`]).
pub(crate) type Prefetch = futures::channel::oneshot::Receiver<Bytes>;

/// A segment file the log no longer lists (renamed over by compaction, deleted by
/// retention or truncation), held until its readers are done so that its last close runs
/// off the shard.
///
/// Invariant: the kernel frees an unlinked file's blocks at its last close, about 7 ms per
/// 32 MiB on ext4 here (287 ms for 43 such files), and a close the shard makes (glommio's
/// io_uring close) runs that work on the shard's thread, stalling every request. A retired
/// file therefore keeps a duplicate descriptor: the shard closes its own descriptor first
/// (cheap, not the last) and the duplicate is closed on the blocking thread pool.
pub struct RetiredFile {
    file: SharedFile,
    last: Option<std::os::fd::OwnedFd>,
}

impl RetiredFile {
    /// Retires `file`. A descriptor that cannot be duplicated (out of descriptors) leaves
    /// the last close to the shard, as before retirement existed.
    pub fn new(file: SharedFile) -> RetiredFile {
        let last = match &file.file {
            Backend::Dma(f) => {
                use std::os::fd::{AsRawFd, BorrowedFd};
                // SAFETY: the descriptor belongs to `f`, open for as long as `file` (which
                // owns `f`) is alive, and the borrow ends within this statement.
                let fd = unsafe { BorrowedFd::borrow_raw(f.as_raw_fd()) };
                fd.try_clone_to_owned().ok()
            }
            Backend::Sim(_) => None,
        };
        RetiredFile { file, last }
    }

    /// Whether nothing but this handle holds the file any more (no read in flight).
    pub fn unused(&self) -> bool {
        Rc::strong_count(&self.file) == 1
    }

    /// Closes the file: the shard's descriptor, then the last one off the shard. A file
    /// still in use is handed back.
    pub async fn close(self) -> Result<(), RetiredFile> {
        if !self.unused() {
            return Err(self);
        }
        let RetiredFile { file, last } = self;
        let Ok(file) = Rc::try_unwrap(file) else {
            unreachable!("an unused file has one holder");
        };
        let path = file.path.clone();
        if let Err(e) = file.close().await {
            tracing::warn!(path = %path.display(), error = %e, "closing a retired segment file");
        }
        if let Some(fd) = last {
            off_shard(move || drop(fd)).await;
        }
        Ok(())
    }
}

impl std::fmt::Debug for RetiredFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RetiredFile({})", self.file.path.display())
    }
}

/// Runs `f`, which makes blocking system calls, on the executor's blocking thread pool:
/// the shard's thread goes on serving meanwhile. Every file system call of shard code that
/// io_uring does not offer goes through here (the `tidy` test keeps `std::fs` and the
/// `*_blocking` functions out of shard code, start-up aside).
pub async fn off_shard<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    assert!(
        sim().is_none(),
        "an off-shard file operation is not routed to the simulated disk"
    );
    glommio::executor().spawn_blocking(f).await
}

/// Reads a whole small file (an index) into memory; `None` when it does not exist.
pub async fn read_small_file(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    if let Some(d) = sim() {
        return sim_read_small_file(&d, path);
    }
    let path = path.to_path_buf();
    off_shard(move || read_small_file_blocking(&path)).await
}

/// [`read_small_file`], blocking the calling thread (start-up, tools, tests).
pub fn read_small_file_blocking(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    if let Some(d) = sim() {
        return sim_read_small_file(&d, path);
    }
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

fn sim_read_small_file(d: &SimDisk, path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    let read = || {
        let f = d.open(path, false, false, false)?;
        let len = usize::try_from(f.size_bytes()?).unwrap_or(usize::MAX);
        f.read(0, len)
    };
    match read() {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// The five steps of an atomic small-file write on the simulated disk, each a separate
/// operation (a crash can fall between any two).
fn sim_write_small_file_atomic(d: &SimDisk, path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let tmp = path.with_extension("tmp");
    let steps = || {
        let f = d.open(&tmp, true, false, false)?;
        f.set_len(0)?;
        f.write(0, bytes)?;
        f.fdatasync()?;
        d.rename(&tmp, path)?;
        match path.parent() {
            Some(dir) => d.fsync_dir(dir),
            None => Ok(()),
        }
    };
    steps().map_err(|e| StorageError::io(path, e))
}

/// Writes a small file atomically: temp file, fsync, rename, fsync directory, blocking the
/// calling thread (start-up, tools, tests); shard code uses `write_small_file_atomic_async`.
pub fn write_small_file_atomic_blocking(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    use std::io::Write;
    if let Some(d) = sim() {
        return sim_write_small_file_atomic(&d, path, bytes);
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| StorageError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| StorageError::io(&tmp, e))?;
    f.sync_data().map_err(|e| StorageError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| StorageError::io(path, e))?;
    if let Some(dir) = path.parent() {
        fsync_dir_blocking(dir)?;
    }
    Ok(())
}

/// Writes a small file atomically without blocking the shard: temporary file, fdatasync,
/// rename, directory fsync, each through io_uring. For state written on a hot path (a Raft
/// group's term and vote, thousands of groups electing at once).
pub async fn write_small_file_atomic_async(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    if let Some(d) = sim() {
        return sim_write_small_file_atomic(&d, path, bytes);
    }
    // glommio opens a directory relative to no directory (EBADF for a relative path).
    let path = &std::path::absolute(path).map_err(|e| StorageError::io(path, e))?;
    let tmp = path.with_extension("tmp");
    let io_err = |p: &Path, e: glommio::GlommioError<()>| StorageError::io(p, to_io(e));
    let f = glommio::io::BufferedFile::create(&tmp)
        .await
        .map_err(|e| io_err(&tmp, e))?;
    let mut written = 0usize;
    while written < bytes.len() {
        let n = f
            .write_at(bytes[written..].to_vec(), written as u64)
            .await
            .map_err(|e| io_err(&tmp, e))?;
        if n == 0 {
            let e = io::Error::new(io::ErrorKind::WriteZero, "short write");
            return Err(StorageError::io(&tmp, e));
        }
        written += n;
    }
    f.fdatasync().await.map_err(|e| io_err(&tmp, e))?;
    f.close().await.map_err(|e| io_err(&tmp, e))?;
    glommio::io::rename(&tmp, path)
        .await
        .map_err(|e| io_err(path, e))?;
    if let Some(dir) = path.parent() {
        fsync_dir_async(dir).await?;
    }
    Ok(())
}

/// Makes a directory's entries (files created, renamed, removed) durable without blocking
/// the shard: the fsync goes through io_uring. A blocking `fsync_dir` on a shard stalls
/// every partition and connection of it for the journal commit, milliseconds under load.
pub async fn fsync_dir_async(dir: &Path) -> Result<(), StorageError> {
    if let Some(d) = sim() {
        return d.fsync_dir(dir).map_err(|e| StorageError::io(dir, e));
    }
    // glommio opens a directory relative to no directory (EBADF for a relative path).
    let dir = &std::path::absolute(dir).map_err(|e| StorageError::io(dir, e))?;
    let io_err = |e: glommio::GlommioError<()>| StorageError::io(dir, to_io(e));
    let d = glommio::io::Directory::open(dir).await.map_err(io_err)?;
    d.sync().await.map_err(io_err)?;
    d.close().await.map_err(io_err)
}

/// An append-only file written through io_uring (buffered I/O): each `append_sync` writes
/// at the end and fdatasyncs. Invariant: `len` is the file's size; the caller serializes
/// appends (one in flight), so an append that returned Ok is durable with all before it.
pub struct AppendFile {
    path: std::path::PathBuf,
    file: AppendBackend,
    len: std::cell::Cell<u64>,
}

enum AppendBackend {
    Buffered(glommio::io::BufferedFile),
    Sim(SimFile),
}

impl AppendFile {
    /// Opens (creating) `path` for appending at its current end.
    pub async fn open(path: &Path) -> Result<AppendFile, StorageError> {
        if let Some(d) = sim() {
            let io_err = |e| StorageError::io(path, e);
            let file = d.open(path, true, false, false).map_err(io_err)?;
            let len = file.size_bytes().map_err(io_err)?;
            return Ok(AppendFile {
                path: path.to_path_buf(),
                file: AppendBackend::Sim(file),
                len: std::cell::Cell::new(len),
            });
        }
        let path = std::path::absolute(path).map_err(|e| StorageError::io(path, e))?;
        let io_err = |e: glommio::GlommioError<()>| StorageError::io(&path, to_io(e));
        let file = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .buffered_open(&path)
            .await
            .map_err(io_err)?;
        let len = file.file_size().await.map_err(io_err)?;
        Ok(AppendFile {
            path,
            file: AppendBackend::Buffered(file),
            len: std::cell::Cell::new(len),
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len.get()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len.get() == 0
    }

    /// Writes `bytes` at the end, then fdatasyncs.
    pub async fn append_sync(&self, bytes: &[u8]) -> Result<(), StorageError> {
        let file = match &self.file {
            AppendBackend::Buffered(f) => f,
            AppendBackend::Sim(f) => {
                // A write, then an fdatasync: two operations a crash can fall between.
                f.write(self.len.get(), bytes)
                    .and_then(|()| f.fdatasync())
                    .map_err(|e| StorageError::io(&self.path, e))?;
                self.len.set(self.len.get() + bytes.len() as u64);
                return Ok(());
            }
        };
        let io_err = |e: glommio::GlommioError<()>| StorageError::io(&self.path, to_io(e));
        let mut written = 0usize;
        while written < bytes.len() {
            let at = self.len.get() + written as u64;
            let n = file
                .write_at(bytes[written..].to_vec(), at)
                .await
                .map_err(io_err)?;
            if n == 0 {
                let e = io::Error::new(io::ErrorKind::WriteZero, "short write");
                return Err(StorageError::io(&self.path, e));
            }
            written += n;
        }
        file.fdatasync().await.map_err(io_err)?;
        self.len.set(self.len.get() + bytes.len() as u64);
        Ok(())
    }

    /// Closes the file.
    pub async fn close(self) -> Result<(), StorageError> {
        match self.file {
            AppendBackend::Buffered(f) => f
                .close()
                .await
                .map_err(|e| StorageError::io(&self.path, to_io(e))),
            AppendBackend::Sim(_) => Ok(()),
        }
    }
}

/// `fsync`s a directory so created, renamed and removed entries are durable, blocking the
/// calling thread (start-up, tools, tests); shard code uses `fsync_dir_async`.
pub fn fsync_dir_blocking(dir: &Path) -> Result<(), StorageError> {
    if let Some(d) = sim() {
        return d.fsync_dir(dir).map_err(|e| StorageError::io(dir, e));
    }
    let d = std::fs::File::open(dir).map_err(|e| StorageError::io(dir, e))?;
    d.sync_all().map_err(|e| StorageError::io(dir, e))
}

/// Removes a file; a missing file is not an error.
pub async fn remove_file(path: &Path) -> Result<(), StorageError> {
    if sim().is_some() {
        return remove_file_blocking(path);
    }
    let path = path.to_path_buf();
    off_shard(move || remove_file_blocking(&path)).await
}

/// [`remove_file`], blocking the calling thread (start-up, tools, tests).
pub fn remove_file_blocking(path: &Path) -> Result<(), StorageError> {
    let removed = match sim() {
        Some(d) => d.remove_file(path),
        None => std::fs::remove_file(path),
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// Creates `dir` and its missing parents, durably: the parent of each directory created is
/// fsynced, or a crash (power loss) could forget a new partition's directory, and with it
/// data acknowledged as durable in files it holds.
pub async fn create_dir_all(dir: &Path) -> Result<(), StorageError> {
    if sim().is_some() {
        return create_dir_all_blocking(dir);
    }
    let dir = dir.to_path_buf();
    off_shard(move || create_dir_all_blocking(&dir)).await
}

/// [`create_dir_all`], blocking the calling thread (start-up, tools, tests).
pub fn create_dir_all_blocking(dir: &Path) -> Result<(), StorageError> {
    let simulated = sim();
    let is_dir = |p: &Path| {
        simulated
            .as_ref()
            .map_or_else(|| p.is_dir(), |d| d.is_dir(p))
    };
    if dir.as_os_str().is_empty() || is_dir(dir) {
        return Ok(());
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_dir_all_blocking(parent)?;
    let made = match &simulated {
        Some(d) => d.mkdir(dir),
        None => std::fs::create_dir(dir),
    };
    match made {
        Ok(()) => fsync_dir_blocking(parent),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && is_dir(dir) => Ok(()),
        Err(e) => Err(StorageError::io(dir, e)),
    }
}

/// The paths of `dir`'s entries, in no particular order.
pub async fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, StorageError> {
    if let Some(d) = sim() {
        return d.list_dir(dir).map_err(|e| StorageError::io(dir, e));
    }
    let dir = dir.to_path_buf();
    off_shard(move || {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| StorageError::io(&dir, e))? {
            out.push(entry.map_err(|e| StorageError::io(&dir, e))?.path());
        }
        Ok(out)
    })
    .await
}

/// Removes `dir` and everything under it; a missing directory is not an error.
pub async fn remove_dir_all(dir: &Path) -> Result<(), StorageError> {
    let missing_is_fine = |dir: &Path, r: io::Result<()>| match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(dir, e)),
    };
    if let Some(d) = sim() {
        return missing_is_fine(dir, d.remove_dir_all(dir));
    }
    let dir = dir.to_path_buf();
    off_shard(move || missing_is_fine(&dir, std::fs::remove_dir_all(&dir))).await
}

/// Cuts the file at `path` to `len_bytes` and makes that durable (a torn tail dropped).
pub async fn truncate_file(path: &Path, len_bytes: u64) -> Result<(), StorageError> {
    if let Some(d) = sim() {
        let cut = || {
            let f = d.open(path, false, false, false)?;
            f.set_len(len_bytes)?;
            f.fdatasync()
        };
        return cut().map_err(|e| StorageError::io(path, e));
    }
    let path = path.to_path_buf();
    off_shard(move || {
        let cut = || -> io::Result<()> {
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            f.set_len(len_bytes)?;
            f.sync_all()
        };
        cut().map_err(|e| StorageError::io(&path, e))
    })
    .await
}

/// Renames `from` to `to` (replacing `to` if it is a file or an empty directory).
pub async fn rename(from: &Path, to: &Path) -> Result<(), StorageError> {
    if let Some(d) = sim() {
        return d.rename(from, to).map_err(|e| StorageError::io(from, e));
    }
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    off_shard(move || std::fs::rename(&from, &to).map_err(|e| StorageError::io(&from, e))).await
}

/// [`probe_direct_io_blocking`] off the shard's thread.
pub async fn probe_direct_io(dir: &Path) -> Result<(), StorageError> {
    if sim().is_some() {
        return Ok(());
    }
    let dir = dir.to_path_buf();
    off_shard(move || probe_direct_io_blocking(&dir)).await
}

/// Checks that `dir` can do O_DIRECT I/O. glommio silently uses buffered I/O on tmpfs, so
/// the filesystem type is checked as well as an actual O_DIRECT open and write.
pub fn probe_direct_io_blocking(dir: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::OpenOptionsExt;
    if sim().is_some() {
        return Ok(());
    }
    let no = |detail: String| StorageError::NoDirectIo {
        path: dir.to_path_buf(),
        detail,
    };
    if is_tmpfs(dir)? {
        return Err(no("tmpfs keeps data in the page cache".into()));
    }
    let probe = dir.join(".strand-direct-io-probe");
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let result = match opened {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Err(no("open with O_DIRECT returned EINVAL".into()))
        }
        Err(e) => Err(StorageError::io(&probe, e)),
    };
    remove_file_blocking(&probe)?;
    result
}

/// Space of the filesystem holding `dir`, from statvfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilesystemSpace {
    /// Bytes an unprivileged process may still write.
    pub available_bytes: u64,
    /// Size of the filesystem.
    pub total_bytes: u64,
}

/// statvfs of `dir` (admin status: disk space left for the data directory), off the
/// shard's thread.
pub async fn filesystem_space(dir: &Path) -> Result<FilesystemSpace, StorageError> {
    if sim().is_some() {
        return filesystem_space_blocking(dir);
    }
    let dir = dir.to_path_buf();
    off_shard(move || filesystem_space_blocking(&dir)).await
}

/// [`filesystem_space`], blocking the calling thread.
pub fn filesystem_space_blocking(dir: &Path) -> Result<FilesystemSpace, StorageError> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(d) = sim() {
        let total_bytes = crate::io_sim::SIM_DISK_BYTES;
        let full = d.faults().full;
        return Ok(FilesystemSpace {
            available_bytes: if full {
                0
            } else {
                total_bytes.saturating_sub(d.used_bytes())
            },
            total_bytes,
        });
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| StorageError::Usage("data directory path contains a NUL byte"))?;
    // SAFETY: statvfs is plain data; zeroed is a valid value of it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path; statvfs only writes into `st`.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(StorageError::io(dir, io::Error::last_os_error()));
    }
    // statvfs fields are u64 on 64-bit Linux but narrower on some 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let frsize = u64::from(st.f_frsize);
    #[allow(clippy::useless_conversion)]
    let (bavail, blocks) = (u64::from(st.f_bavail), u64::from(st.f_blocks));
    Ok(FilesystemSpace {
        available_bytes: bavail.saturating_mul(frsize),
        total_bytes: blocks.saturating_mul(frsize),
    })
}

fn is_tmpfs(dir: &Path) -> Result<bool, StorageError> {
    Ok(fs_magic(dir)? == libc::TMPFS_MAGIC)
}

/// The device (`st_dev`) holding `dir` when an O_DIRECT overwrite of written blocks there
/// changes no metadata, so that a device cache flush makes it durable (`device_flush`):
/// ext4 and XFS overwrite in place; copy-on-write filesystems (btrfs, ZFS) allocate new
/// blocks on every write, and anything else is not assumed to (`None`). Off the shard's
/// thread; the simulated disk models ext4 on one device (0).
pub async fn in_place_device(dir: &Path) -> Option<u64> {
    if sim().is_some() {
        return Some(0);
    }
    let dir = dir.to_path_buf();
    off_shard(move || {
        use std::os::unix::fs::MetadataExt;
        let in_place =
            fs_magic(&dir).is_ok_and(|m| m == libc::EXT4_SUPER_MAGIC || m == libc::XFS_SUPER_MAGIC);
        in_place
            .then(|| std::fs::metadata(&dir).ok().map(|m| m.dev()))
            .flatten()
    })
    .await
}

/// statfs's `f_type` of the filesystem holding `dir`.
fn fs_magic(dir: &Path) -> Result<libc::c_long, StorageError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| StorageError::Usage("data directory path contains a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a correctly sized out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; statfs only writes into `st`.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(StorageError::io(dir, io::Error::last_os_error()));
    }
    Ok(st.f_type)
}

/// Makes glommio probe io_uring polled I/O (IOPOLL) support on `dir`'s device with a real
/// read. glommio probes on the first DMA file it opens per device and caches the answer; if
/// that file is empty, the probe read ends at EOF without reaching the device, "succeeds",
/// and every later read on a device without polling fails with EOPNOTSUPP (seen on virtio
/// disks). Opening a non-empty file first gives the probe a real read. Run on each
/// executor thread before opening segments there.
pub async fn prime_device_probe(dir: &Path) -> Result<(), StorageError> {
    if sim().is_some() {
        return Ok(());
    }
    thread_local! {
        static PRIMED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    use std::os::unix::fs::MetadataExt;
    let owned = dir.to_path_buf();
    let dev = off_shard(move || std::fs::metadata(&owned).map_err(|e| StorageError::io(&owned, e)))
        .await?
        .dev();
    if PRIMED.with(|p| p.borrow().contains(&dev)) {
        return Ok(());
    }
    // One probe file per thread: shards prime concurrently on the same directory.
    let probe = dir.join(
        format!(
            ".strand-iopoll-probe-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        )
        .replace(['(', ')'], ""),
    );
    let (owned_dir, written) = (dir.to_path_buf(), probe.clone());
    let (target, ours) = off_shard(move || probe_target(&owned_dir, &written)).await?;
    let file = DmaFile::open(&target)
        .await
        .map_err(|e| StorageError::io(&target, to_io(e)));
    if let Ok(f) = file {
        let _ = f.close().await;
    }
    if ours {
        remove_file(&target).await?;
    }
    PRIMED.with(|p| p.borrow_mut().push(dev));
    Ok(())
}

/// A non-empty file on `dir`'s device for the probe read: `probe`, written now (`true`:
/// remove it after), or, when the disk is full, a file of at least one block already in
/// `dir` or one level below (a segment), so that a broker whose disk filled up still
/// starts and serves what it holds.
fn probe_target(dir: &Path, probe: &Path) -> Result<(PathBuf, bool), StorageError> {
    let e = match std::fs::write(probe, vec![0u8; WRITE_ALIGN_BYTES as usize]) {
        Ok(()) => return Ok((probe.to_path_buf(), true)),
        Err(e) => e,
    };
    if e.raw_os_error() != Some(libc::ENOSPC) {
        return Err(StorageError::io(probe, e));
    }
    let _ = std::fs::remove_file(probe);
    let big_enough = |p: &Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.len() >= WRITE_ALIGN_BYTES)
    };
    let entries = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|it| it.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    let top = entries(dir);
    let found = top.iter().find(|p| big_enough(p)).cloned().or_else(|| {
        top.iter()
            .filter(|p| p.is_dir())
            .find_map(|d| entries(d).into_iter().find(|p| big_enough(p)))
    });
    match found {
        Some(p) => {
            tracing::warn!(dir = %dir.display(), "disk full: probing I/O polling with an existing file");
            Ok((p, false))
        }
        None => Err(StorageError::io(probe, e)),
    }
}

/// Returns `Pending` once (waking itself), then `Ready`: lets the other tasks of a
/// simulated run go first.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_directories_are_created_once_and_again_is_fine() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let deep = tmp.path().join("a").join("b").join("c");
        create_dir_all_blocking(&deep).expect("created");
        assert!(deep.is_dir());
        create_dir_all_blocking(&deep).expect("exists already");
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").expect("file");
        assert!(
            create_dir_all_blocking(&file.join("d")).is_err(),
            "a file on the way"
        );
    }

    /// Reads of 64 KiB and more hand over the buffer the kernel read into (glommio's
    /// `ReadResult::into_heap`); smaller ones are copied out of the registered pool. Either
    /// way the bytes are the file's, also at unaligned positions and at the end of file.
    #[test]
    fn large_reads_keep_their_buffer_and_every_read_returns_the_files_bytes() {
        let tmp = tempfile::tempdir_in(".").expect("tempdir");
        let path = tmp.path().join("seg");
        let size = 3 * 64 * 1024 + 4096;
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4096) as u8).collect();
        crate::io_runtime::block_on("read-heap-test", 1, async move {
            prime_device_probe(tmp.path()).await.expect("probe");
            let f = SegmentFile::create(&path, WriteSync::Fdatasync)
                .await
                .expect("create");
            f.write_aligned(0, &data).await.expect("write");
            for (pos, len) in [(0, 128 * 1024), (777, 150_000), (0, 100), (1000, 5000)] {
                let got = f
                    .read(pos as u64, len)
                    .await
                    .unwrap_or_else(|e| panic!("read {pos}+{len}: {e}"));
                assert_eq!(&got[..], &data[pos..pos + len], "read {pos}+{len}");
            }
            // Past the end: what is there.
            let got = f.read(size as u64 - 10, 100_000).await.expect("read");
            assert_eq!(&got[..], &data[size - 10..]);
            // The buffer itself, not a copy: a 64 KiB read at an unaligned position.
            let Backend::Dma(dma) = &f.file else {
                panic!("a real file")
            };
            let r = dma.read_at(100, 64 * 1024).await.expect("read_at");
            let at = r.as_ptr();
            let heap = r.into_heap().expect("a large read is heap memory");
            assert_eq!(heap.as_ref().as_ptr(), at, "the same bytes, not a copy");
            assert_eq!(heap.as_ref(), &data[100..100 + 64 * 1024]);
            let b = Bytes::from_owner(heap);
            let moved = std::thread::spawn(move || b.len()).join().expect("thread");
            assert_eq!(moved, 64 * 1024, "the bytes cross threads");
            // A small read, and a large one with a slice of it still alive, stay where
            // they are.
            let small = dma.read_at(0, 4096).await.expect("read_at");
            assert!(small.into_heap().is_err(), "a small read is pool memory");
            let big = dma.read_at(0, 64 * 1024).await.expect("read_at");
            let part = glommio::io::ReadResult::slice(&big, 0, 10).expect("slice");
            let big = big.into_heap().expect_err("a slice of it is alive");
            assert_eq!(&part[..], &data[..10]);
            assert_eq!(&big[..], &data[..64 * 1024]);
            f.close().await.expect("close");
        })
        .expect("executor");
    }

    /// Reads of 1–2 MiB (fetch and read-ahead windows) land in buffers of one 2 MiB class,
    /// aligned to 2 MiB (a transparent huge page when the kernel has one: one request to
    /// the device), reused once dropped, and return the file's bytes every time.
    #[test]
    fn window_reads_reuse_aligned_buffers_of_one_class() {
        const CLASS: usize = 2 << 20;
        let tmp = tempfile::tempdir_in(".").expect("tempdir");
        let path = tmp.path().join("seg");
        let size = 3 << 20;
        let data: Vec<u8> = (0..size).map(|i| (i * 13 + i / 4096) as u8).collect();
        crate::io_runtime::block_on("read-class-test", 1, async move {
            prime_device_probe(tmp.path()).await.expect("probe");
            let f = SegmentFile::create(&path, WriteSync::Fdatasync)
                .await
                .expect("create");
            f.write_aligned(0, &data).await.expect("write");
            let first = f.read(0, 1_500_000).await.expect("read");
            assert_eq!(&first[..], &data[..1_500_000]);
            let at = first.as_ptr() as usize;
            assert_eq!(at % CLASS, 0, "aligned to the class");
            drop(first);
            let second = f.read(4096, 1 << 20).await.expect("read");
            assert_eq!(second.as_ptr() as usize, at, "the same buffer again");
            assert_eq!(
                &second[..],
                &data[4096..4096 + (1 << 20)],
                "the file's bytes"
            );
            // Another read while the first is held gets a buffer of its own.
            let third = f.read(777, 1_200_000).await.expect("read");
            assert_ne!(third.as_ptr() as usize & !(CLASS - 1), at);
            assert_eq!(&third[..], &data[777..777 + 1_200_000]);
            assert_eq!(read_buffer_bytes(1_200_000), CLASS);
            assert_eq!(read_buffer_bytes(100_000), 102_400);
            f.close().await.expect("close");
        })
        .expect("executor");
    }
}
