//! A simulated disk for the deterministic simulators: while a [`SimDisk`] is entered on a
//! thread, every operation of `io` and `io_runtime` goes to it instead of glommio, and
//! each finishes synchronously (its future is ready at the first poll; [`block_on`] drives
//! it).
//!
//! Invariants of the model (POSIX durability, taken adversarially):
//! - A file's bytes are `live` (what reads see) and `durable` (what a crash keeps).
//!   Buffered writes and size changes queue in order in `pending` until an fdatasync; a
//!   write through an `O_DSYNC` handle makes pending and itself durable, as fdatasync after
//!   it would.
//! - A directory's entries are likewise `live` and `durable`, with the creates, renames and
//!   removals since its last fsync queued in order. A new file or directory survives a
//!   crash only once its parent was fsynced after it was made.
//! - A crash keeps a random prefix of each queue; the first write not kept may survive as
//!   a random subset of its 512-byte sectors (torn). In one crash of four every pending
//!   sector survives independently (write-back out of order). Whatever no durable entry
//!   reaches is gone.
//! - A failed fdatasync drops the pending writes without making them durable while reads
//!   still see them (Linux's behaviour: a retried fsync then succeeds and saves nothing).
//! - Every fdatasync (and `O_DSYNC` write) that succeeds also flushes the device's write
//!   cache: in every other file, the longest prefix of its queue made only of writes into
//!   blocks already durably written (no allocation, no size change) becomes durable, as a
//!   block-layer flush makes every completed overwrite durable. A write into blocks never
//!   durably written (fallocated or past the end) needs its own file's sync.
//! - After a crash, handles opened before it fail with EIO.
//!
//! Production never enters a disk, so a planted bug ([`planted`]) cannot be switched on in
//! it: every check returns false when no disk is entered.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Capacity the simulated disk reports (statvfs); only [`DiskFaults::full`] refuses writes.
pub const SIM_DISK_BYTES: u64 = 1 << 30;
/// Size of the unit that a torn write keeps or loses.
pub const SECTOR_BYTES: usize = 512;
/// Polls after which [`block_on`] gives up: a simulated operation never waits, so a future
/// still pending is waiting on something that will not happen (a missing route, a lock
/// held across a crash).
const POLLS_MAX: u32 = 1000;

/// Faults the disk injects until changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// Reads fail with EIO at this rate (per thousand).
    pub read_error_per_mille: u32,
    /// The disk is full: a write or size change that grows a file fails with ENOSPC.
    pub full: bool,
    /// This many next fdatasyncs (or O_DSYNC writes) fail with EIO.
    pub fail_syncs: u32,
}

/// Options fixed when a disk is made.
#[derive(Clone, Debug, Default)]
pub struct DiskOptions {
    /// Names of planted bugs that code under test checks with [`planted`].
    pub planted: BTreeSet<&'static str>,
    /// Each fdatasync first yields to the other tasks once (a real one takes time), so
    /// flushes of several logs overlap and share device flushes (`device_flush`).
    pub slow_syncs: bool,
}

/// A simulated disk; clones share it.
#[derive(Clone)]
pub struct SimDisk(Rc<RefCell<DiskState>>);

type InodeId = u64;
const ROOT: InodeId = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(InodeId),
    Dir(InodeId),
}

enum Pending {
    Write { pos: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Default)]
struct FileNode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// Indexes of the `BLOCK_BYTES` blocks durably written (a fallocated or zero-extended
    /// block is not): a device flush makes an overwrite of these durable.
    written: BTreeSet<u64>,
}

/// Block of the device-flush model: what a write allocates or converts as a whole.
const BLOCK_BYTES: u64 = 4096;

/// The blocks `[pos, pos + len)` touches.
fn blocks_of(pos: u64, len: usize) -> std::ops::Range<u64> {
    let end = pos + len as u64;
    pos / BLOCK_BYTES..end.div_ceil(BLOCK_BYTES)
}

impl FileNode {
    /// Applies `p` to the durable image and keeps `written` in step.
    fn make_durable(&mut self, p: &Pending) {
        apply(&mut self.durable, p);
        match p {
            Pending::Write { pos, bytes } => self.written.extend(blocks_of(*pos, bytes.len())),
            Pending::SetLen(n) => self.written.retain(|b| b * BLOCK_BYTES < *n),
        }
    }

    /// Whether a device flush makes `p` durable: an overwrite of durably written blocks
    /// that does not grow the file.
    fn flushed_by_device(&self, p: &Pending) -> bool {
        match p {
            Pending::Write { pos, bytes } => {
                pos + bytes.len() as u64 <= self.durable.len() as u64
                    && blocks_of(*pos, bytes.len()).all(|b| self.written.contains(&b))
            }
            Pending::SetLen(_) => false,
        }
    }
}

/// One queued directory change: its entries set (Some) or removed (None) at once.
type DirOp = Vec<(String, Option<Entry>)>;

#[derive(Default)]
struct DirNode {
    live: BTreeMap<String, Entry>,
    durable: BTreeMap<String, Entry>,
    pending: Vec<DirOp>,
}

struct DiskState {
    rng: u64,
    opts: DiskOptions,
    files: BTreeMap<InodeId, FileNode>,
    dirs: BTreeMap<InodeId, DirNode>,
    next_inode: InodeId,
    incarnation: u64,
    faults: DiskFaults,
    quiet: u32,
    crash_in_ops: Option<u64>,
    crash_fired: bool,
    generation: u64,
    ops: u64,
}

thread_local! {
    static CURRENT: RefCell<Option<SimDisk>> = const { RefCell::new(None) };
}

/// While alive, this thread's file operations go to a simulated disk.
pub struct EnterGuard {
    previous: Option<SimDisk>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Whether the planted bug `name` is on: only ever while a simulated disk that plants it
/// is entered.
pub fn planted(name: &str) -> bool {
    SimDisk::current().is_some_and(|d| d.0.borrow().opts.planted.contains(name))
}

/// Runs a future whose every wait is a simulated operation to completion on this thread.
/// Panics if it is still pending after `POLLS_MAX` polls (it waits on something that no
/// simulated operation completes).
pub fn block_on<T>(fut: impl Future<Output = T>) -> T {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..POLLS_MAX {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("a simulated operation stayed pending: something waits on real I/O or a timer");
}

/// EIO, with what caused it for the log (a plain raw OS error: `io::classify` reads it).
fn eio(what: &str) -> io::Error {
    tracing::debug!(what, "simulated disk: EIO");
    io::Error::from_raw_os_error(libc::EIO)
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

/// `p` made absolute from the disk's root, `.` and `..` resolved.
fn components(p: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn apply_write(buf: &mut Vec<u8>, pos: u64, bytes: &[u8]) {
    let Ok(pos) = usize::try_from(pos) else {
        return;
    };
    let end = pos + bytes.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[pos..end].copy_from_slice(bytes);
}

fn set_len(buf: &mut Vec<u8>, len: u64) {
    buf.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
}

fn apply(buf: &mut Vec<u8>, p: &Pending) {
    match p {
        Pending::Write { pos, bytes } => apply_write(buf, *pos, bytes),
        Pending::SetLen(n) => set_len(buf, *n),
    }
}

fn apply_dir_op(map: &mut BTreeMap<String, Entry>, op: &DirOp) {
    for (name, e) in op {
        match e {
            Some(e) => map.insert(name.clone(), *e),
            None => map.remove(name),
        };
    }
}

impl DiskState {
    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn faulty(&self) -> bool {
        self.quiet == 0
    }

    /// Fails every operation after a crash point until the node restarts.
    fn check_alive(&self) -> io::Result<()> {
        if self.crash_fired {
            Err(eio("the disk crashed"))
        } else {
            Ok(())
        }
    }

    /// Counts a mutating operation; true when it is the armed crash point.
    fn crash_point(&mut self) -> bool {
        if !self.faulty() {
            return false;
        }
        self.ops += 1;
        match self.crash_in_ops {
            Some(0) | Some(1) => {
                self.crash_in_ops = None;
                true
            }
            Some(k) => {
                self.crash_in_ops = Some(k - 1);
                false
            }
            None => false,
        }
    }

    fn lookup_in(&self, comps: &[String], durable: bool) -> Option<Entry> {
        let mut at = Entry::Dir(ROOT);
        for c in comps {
            let Entry::Dir(d) = at else { return None };
            let dir = self.dirs.get(&d)?;
            let map = if durable { &dir.durable } else { &dir.live };
            at = *map.get(c)?;
        }
        Some(at)
    }

    fn lookup(&self, p: &Path) -> Option<Entry> {
        self.lookup_in(&components(p), false)
    }

    /// The live parent directory of `p` and `p`'s name in it.
    fn parent_of(&self, p: &Path) -> io::Result<(InodeId, String)> {
        let mut comps = components(p);
        let name = comps
            .pop()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        match self.lookup_in(&comps, false) {
            Some(Entry::Dir(d)) => Ok((d, name)),
            Some(Entry::File(_)) => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    fn dir_change(&mut self, dir: InodeId, op: DirOp) {
        if let Some(d) = self.dirs.get_mut(&dir) {
            apply_dir_op(&mut d.live, &op);
            d.pending.push(op);
        }
    }

    fn new_inode(&mut self) -> InodeId {
        self.next_inode += 1;
        self.next_inode
    }

    /// Builds the crash image: a random part of every queue becomes durable, the rest is
    /// lost, and what no durable entry reaches is dropped.
    fn crash(&mut self) {
        let scatter = self.below(4) == 0;
        let ids: Vec<InodeId> = self.files.keys().copied().collect();
        for id in ids {
            let Some(f) = self.files.get_mut(&id) else {
                continue;
            };
            let pending = std::mem::take(&mut f.pending);
            let mut durable = std::mem::take(&mut f.durable);
            if scatter {
                for p in &pending {
                    match p {
                        Pending::Write { pos, bytes } => self.torn(&mut durable, *pos, bytes),
                        Pending::SetLen(n) => {
                            if self.below(2) == 0 {
                                set_len(&mut durable, *n);
                            }
                        }
                    }
                }
            } else {
                let keep = usize::try_from(self.below(pending.len() as u64 + 1)).unwrap_or(0);
                for p in &pending[..keep] {
                    apply(&mut durable, p);
                }
                if let Some(Pending::Write { pos, bytes }) = pending.get(keep) {
                    self.torn(&mut durable, *pos, bytes);
                }
            }
            if let Some(f) = self.files.get_mut(&id) {
                // Blocks written by what the crash kept are not counted as durably
                // written, and any size change queued may have freed blocks (the model
                // stays on the side of needing a sync).
                let len = pending
                    .iter()
                    .filter_map(|p| match p {
                        Pending::SetLen(n) => Some(*n),
                        Pending::Write { .. } => None,
                    })
                    .fold(durable.len() as u64, u64::min);
                f.written.retain(|b| b * BLOCK_BYTES < len);
                f.live = durable.clone();
                f.durable = durable;
            }
        }
        let dir_ids: Vec<InodeId> = self.dirs.keys().copied().collect();
        for id in dir_ids {
            let n = self.dirs.get(&id).map_or(0, |d| d.pending.len() as u64);
            let keep = usize::try_from(self.below(n + 1)).unwrap_or(0);
            if let Some(d) = self.dirs.get_mut(&id) {
                let pending = std::mem::take(&mut d.pending);
                for op in &pending[..keep] {
                    apply_dir_op(&mut d.durable, op);
                }
                d.live = d.durable.clone();
            }
        }
        self.collect_unreachable();
        self.incarnation += 1;
        self.generation += 1;
    }

    /// Each sector of the write survives with probability one half.
    fn torn(&mut self, durable: &mut Vec<u8>, pos: u64, bytes: &[u8]) {
        for (k, sector) in bytes.chunks(SECTOR_BYTES).enumerate() {
            if self.below(2) == 0 {
                apply_write(durable, pos + (k * SECTOR_BYTES) as u64, sector);
            }
        }
    }

    fn collect_unreachable(&mut self) {
        let mut files = BTreeSet::new();
        let mut dirs = BTreeSet::from([ROOT]);
        let mut stack = vec![ROOT];
        while let Some(d) = stack.pop() {
            let Some(dir) = self.dirs.get(&d) else {
                continue;
            };
            for e in dir.live.values() {
                match *e {
                    Entry::File(f) => {
                        files.insert(f);
                    }
                    Entry::Dir(c) => {
                        if dirs.insert(c) {
                            stack.push(c);
                        }
                    }
                }
            }
        }
        self.files.retain(|id, _| files.contains(id));
        self.dirs.retain(|id, _| dirs.contains(id));
    }

    fn sync_file(&mut self, id: InodeId) -> io::Result<()> {
        let fail = self.faulty() && self.faults.fail_syncs > 0;
        if fail {
            self.faults.fail_syncs -= 1;
        }
        let Some(f) = self.files.get_mut(&id) else {
            return Ok(());
        };
        let pending = std::mem::take(&mut f.pending);
        if fail {
            return Err(eio("fdatasync failed"));
        }
        for p in &pending {
            f.make_durable(p);
        }
        self.flush_device();
        self.generation += 1;
        Ok(())
    }

    /// A device cache flush: every file's leading overwrites of durably written blocks
    /// become durable (see the module doc).
    fn flush_device(&mut self) {
        for f in self.files.values_mut() {
            let n = f
                .pending
                .iter()
                .take_while(|p| f.flushed_by_device(p))
                .count();
            let flushed: Vec<Pending> = f.pending.drain(..n).collect();
            for p in &flushed {
                f.make_durable(p);
            }
        }
    }
}

/// An open file of a simulated disk (what a file descriptor is to the kernel).
pub struct SimFile {
    disk: SimDisk,
    inode: InodeId,
    dsync: bool,
    incarnation: u64,
}

impl std::fmt::Debug for SimFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimFile(inode {})", self.inode)
    }
}

impl SimDisk {
    /// A new, empty disk (only its root directory), its randomness from `seed`.
    pub fn new(seed: u64, opts: DiskOptions) -> SimDisk {
        let mut dirs = BTreeMap::new();
        dirs.insert(ROOT, DirNode::default());
        SimDisk(Rc::new(RefCell::new(DiskState {
            rng: seed ^ 0x5d1c_d15c,
            opts,
            files: BTreeMap::new(),
            dirs,
            next_inode: ROOT,
            incarnation: 0,
            faults: DiskFaults::default(),
            quiet: 0,
            crash_in_ops: None,
            crash_fired: false,
            generation: 0,
            ops: 0,
        })))
    }

    /// Routes this thread's file operations to this disk until the guard drops.
    pub fn enter(&self) -> EnterGuard {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        EnterGuard { previous }
    }

    /// The disk entered on this thread, if any.
    pub fn current() -> Option<SimDisk> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Crashes the disk (power loss): builds the crash image unless a crash point already
    /// built it, and ends every open handle. Operations work again afterwards.
    pub fn crash(&self) {
        let mut st = self.0.borrow_mut();
        if st.crash_fired {
            st.crash_fired = false;
        } else {
            st.crash();
        }
        st.crash_in_ops = None;
    }

    /// Reseeds the disk's randomness (a world drawing each crash from its own generator).
    pub fn reseed(&self, seed: u64) {
        self.0.borrow_mut().rng = seed;
    }

    /// Arms a crash at the `k`-th mutating operation from now (1 = the next one): that
    /// operation is the one torn, and it and every later one fail with EIO.
    pub fn crash_after_ops(&self, k: u64) {
        self.0.borrow_mut().crash_in_ops = Some(k);
    }

    /// Whether a crash point is armed and not reached yet.
    pub fn armed(&self) -> bool {
        self.0.borrow().crash_in_ops.is_some()
    }

    /// Disarms a crash point not reached yet.
    pub fn disarm(&self) {
        self.0.borrow_mut().crash_in_ops = None;
    }

    /// Whether an armed crash point fired (the disk fails everything until [`Self::crash`]).
    pub fn crashed(&self) -> bool {
        self.0.borrow().crash_fired
    }

    /// Sets the faults injected from now on.
    pub fn set_faults(&self, f: DiskFaults) {
        self.0.borrow_mut().faults = f;
    }

    /// The faults injected now.
    pub fn faults(&self) -> DiskFaults {
        self.0.borrow().faults
    }

    /// Runs `f` with no faults injected and no operation counted toward a crash point
    /// (a checker reading the disk must not change the schedule).
    pub fn without_faults<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.borrow_mut().quiet += 1;
        let out = f();
        self.0.borrow_mut().quiet -= 1;
        out
    }

    /// Mutating operations counted so far (the range a crash point is drawn from).
    pub fn ops(&self) -> u64 {
        self.0.borrow().ops
    }

    /// The durable entries of directory `dir` (what a crash now would keep), sorted.
    pub fn durable_list(&self, dir: &Path) -> Vec<PathBuf> {
        let st = self.0.borrow();
        match st.lookup_in(&components(dir), true) {
            Some(Entry::Dir(d)) => st
                .dirs
                .get(&d)
                .map(|n| n.durable.keys().map(|k| dir.join(k)).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The durable bytes of the file at `path` (through durable entries only).
    pub fn durable_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.0.borrow();
        match st.lookup_in(&components(path), true)? {
            Entry::File(id) => st.files.get(&id).map(|f| f.durable.clone()),
            Entry::Dir(_) => None,
        }
    }

    /// Changes whenever anything becomes durable or a crash happens (a cache key for
    /// views built from the durable image).
    pub fn durable_generation(&self) -> u64 {
        self.0.borrow().generation
    }

    fn with<R>(&self, f: impl FnOnce(&mut DiskState) -> io::Result<R>) -> io::Result<R> {
        let mut st = self.0.borrow_mut();
        st.check_alive()?;
        f(&mut st)
    }

    /// A mutating namespace or data operation: counted toward the crash point; at the
    /// crash point `apply` still happens (its effect is pending, so the crash keeps it or
    /// not), then the crash image is built and EIO returned.
    fn mutate<R>(&self, apply: impl FnOnce(&mut DiskState) -> io::Result<R>) -> io::Result<R> {
        let mut st = self.0.borrow_mut();
        st.check_alive()?;
        if st.crash_point() {
            tracing::info!(op = st.ops, "simulated disk: crash point reached");
            let _ = apply(&mut st);
            st.crash();
            st.crash_fired = true;
            return Err(eio("crashed during this operation"));
        }
        apply(&mut st)
    }

    /// Opens `path`: `create_new` fails if it exists; `create` makes it if missing.
    pub fn open(
        &self,
        path: &Path,
        create: bool,
        create_new: bool,
        dsync: bool,
    ) -> io::Result<SimFile> {
        let existing = self.with(|st| Ok(st.lookup(path)))?;
        let inode = match existing {
            Some(Entry::File(id)) if !create_new => id,
            Some(Entry::File(_)) => return Err(io::Error::from_raw_os_error(libc::EEXIST)),
            Some(Entry::Dir(_)) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            None if !create => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            None => self.mutate(|st| {
                let (dir, name) = st.parent_of(path)?;
                let id = st.new_inode();
                st.files.insert(id, FileNode::default());
                st.dir_change(dir, vec![(name, Some(Entry::File(id)))]);
                Ok(id)
            })?,
        };
        let incarnation = self.0.borrow().incarnation;
        Ok(SimFile {
            disk: self.clone(),
            inode,
            dsync,
            incarnation,
        })
    }

    /// Makes directory `path` (its parent must exist).
    pub fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.mutate(|st| {
            let (dir, name) = st.parent_of(path)?;
            if st
                .dirs
                .get(&dir)
                .is_some_and(|d| d.live.contains_key(&name))
            {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            let id = st.new_inode();
            st.dirs.insert(id, DirNode::default());
            st.dir_change(dir, vec![(name, Some(Entry::Dir(id)))]);
            Ok(())
        })
    }

    /// Whether `path` is a live directory.
    pub fn is_dir(&self, path: &Path) -> bool {
        matches!(self.0.borrow().lookup(path), Some(Entry::Dir(_)))
    }

    /// Whether `path` names anything live.
    pub fn exists(&self, path: &Path) -> bool {
        self.0.borrow().lookup(path).is_some()
    }

    /// Makes the entries of directory `path` durable.
    pub fn fsync_dir(&self, path: &Path) -> io::Result<()> {
        self.mutate(|st| {
            let Some(Entry::Dir(d)) = st.lookup(path) else {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            };
            if let Some(dir) = st.dirs.get_mut(&d) {
                for op in std::mem::take(&mut dir.pending) {
                    apply_dir_op(&mut dir.durable, &op);
                }
            }
            st.generation += 1;
            Ok(())
        })
    }

    /// Removes the file (not a directory) at `path`.
    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.mutate(|st| {
            let (dir, name) = st.parent_of(path)?;
            match st.dirs.get(&dir).and_then(|d| d.live.get(&name)) {
                Some(Entry::File(_)) => {
                    st.dir_change(dir, vec![(name, None)]);
                    Ok(())
                }
                Some(Entry::Dir(_)) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
                None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        })
    }

    /// Removes `path` and everything under it, children first (each a separate queued
    /// change, as `rm -r` makes them).
    pub fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let children: Vec<(String, Entry)> = self.with(|st| match st.lookup(path) {
            Some(Entry::Dir(d)) => Ok(st
                .dirs
                .get(&d)
                .map(|n| n.live.iter().map(|(k, v)| (k.clone(), *v)).collect())
                .unwrap_or_default()),
            Some(Entry::File(_)) => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        })?;
        for (name, e) in children {
            let child = path.join(name);
            match e {
                Entry::File(_) => self.remove_file(&child)?,
                Entry::Dir(_) => self.remove_dir_all(&child)?,
            }
        }
        self.mutate(|st| {
            let (dir, name) = st.parent_of(path)?;
            st.dir_change(dir, vec![(name, None)]);
            Ok(())
        })
    }

    /// Renames `from` to `to`, replacing a file at `to`; one atomic change when both are
    /// in the same directory.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.mutate(|st| {
            let (fd, fname) = st.parent_of(from)?;
            let (td, tname) = st.parent_of(to)?;
            let entry = st
                .dirs
                .get(&fd)
                .and_then(|d| d.live.get(&fname))
                .copied()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            if let Some(Entry::Dir(_)) = st.dirs.get(&td).and_then(|d| d.live.get(&tname)) {
                return Err(io::Error::from_raw_os_error(libc::EISDIR));
            }
            if fd == td {
                st.dir_change(fd, vec![(fname, None), (tname, Some(entry))]);
            } else {
                st.dir_change(td, vec![(tname, Some(entry))]);
                st.dir_change(fd, vec![(fname, None)]);
            }
            Ok(())
        })
    }

    /// The live entries of directory `path`, in an order drawn from the disk's randomness
    /// (callers must not depend on it).
    pub fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.with(|st| {
            let Some(Entry::Dir(d)) = st.lookup(path) else {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            };
            let mut names: Vec<String> = st
                .dirs
                .get(&d)
                .map(|n| n.live.keys().cloned().collect())
                .unwrap_or_default();
            for i in (1..names.len()).rev() {
                let j = usize::try_from(st.below(i as u64 + 1)).unwrap_or(0);
                names.swap(i, j);
            }
            Ok(names.into_iter().map(|n| path.join(n)).collect())
        })
    }

    /// Total live bytes of every file (the disk's usage).
    pub fn used_bytes(&self) -> u64 {
        self.0
            .borrow()
            .files
            .values()
            .map(|f| f.live.len() as u64)
            .sum()
    }
}

impl SimFile {
    fn with<R>(&self, f: impl FnOnce(&mut DiskState) -> io::Result<R>) -> io::Result<R> {
        self.disk.with(|st| {
            if st.incarnation != self.incarnation {
                return Err(eio("handle from before a crash"));
            }
            f(st)
        })
    }

    fn mutate<R>(&self, f: impl FnOnce(&mut DiskState) -> io::Result<R>) -> io::Result<R> {
        self.with(|_| Ok(()))?;
        self.disk.mutate(f)
    }

    fn grows(st: &DiskState, id: InodeId, to: u64) -> bool {
        st.faulty()
            && st.faults.full
            && st
                .files
                .get(&id)
                .is_some_and(|f| (f.live.len() as u64) < to)
    }

    /// Writes `bytes` at `pos`: queued until an fdatasync, or durable at once (with all
    /// queued before it) on an `O_DSYNC` handle.
    pub fn write(&self, pos: u64, bytes: &[u8]) -> io::Result<()> {
        let id = self.inode;
        let dsync = self.dsync;
        self.mutate(|st| {
            if Self::grows(st, id, pos + bytes.len() as u64) {
                return Err(enospc());
            }
            if let Some(f) = st.files.get_mut(&id) {
                apply_write(&mut f.live, pos, bytes);
                f.pending.push(Pending::Write {
                    pos,
                    bytes: bytes.to_vec(),
                });
            }
            if dsync {
                st.sync_file(id)?;
            }
            Ok(())
        })
    }

    /// Sets the file's size (a truncate, or a preallocation that grows it).
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        let id = self.inode;
        self.mutate(|st| {
            if Self::grows(st, id, len) {
                return Err(enospc());
            }
            if let Some(f) = st.files.get_mut(&id) {
                set_len(&mut f.live, len);
                f.pending.push(Pending::SetLen(len));
            }
            Ok(())
        })
    }

    /// Whether the disk was made with [`DiskOptions::slow_syncs`].
    pub fn slow_syncs(&self) -> bool {
        self.disk.0.borrow().opts.slow_syncs
    }

    /// fdatasync: everything queued becomes durable.
    pub fn fdatasync(&self) -> io::Result<()> {
        let id = self.inode;
        self.mutate(|st| st.sync_file(id))
    }

    /// Reads up to `len` bytes at `pos` (fewer at the end of the file).
    pub fn read(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        let id = self.inode;
        self.with(|st| {
            if st.faulty() && st.faults.read_error_per_mille > 0 {
                let roll = st.below(1000);
                if roll < u64::from(st.faults.read_error_per_mille) {
                    return Err(eio("read error"));
                }
            }
            let live = st.files.get(&id).map_or(&[][..], |f| &f.live[..]);
            let start = usize::try_from(pos).unwrap_or(usize::MAX).min(live.len());
            let end = start.saturating_add(len).min(live.len());
            Ok(live[start..end].to_vec())
        })
    }

    /// The file's live size.
    pub fn size_bytes(&self) -> io::Result<u64> {
        let id = self.inode;
        self.with(|st| Ok(st.files.get(&id).map_or(0, |f| f.live.len() as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk() -> SimDisk {
        SimDisk::new(7, DiskOptions::default())
    }

    #[test]
    fn a_file_survives_a_crash_only_once_synced_and_its_directory_fsynced() {
        for seed in 0..50 {
            let d = SimDisk::new(seed, DiskOptions::default());
            d.mkdir(Path::new("/a")).expect("mkdir");
            d.fsync_dir(Path::new("/")).expect("fsync root");
            let f = d
                .open(Path::new("/a/f"), true, true, false)
                .expect("create");
            f.write(0, b"hello").expect("write");
            f.fdatasync().expect("sync");
            d.fsync_dir(Path::new("/a")).expect("fsync dir");
            f.write(5, b" world").expect("write");
            d.crash();
            let got = d
                .durable_bytes(Path::new("/a/f"))
                .expect("the file is durable");
            assert!(got.starts_with(b"hello"), "{got:?}");
            assert!(f.read(0, 5).is_err(), "an old handle fails after a crash");
            let g = d
                .open(Path::new("/a/f"), false, false, false)
                .expect("reopen");
            assert_eq!(g.read(0, 5).expect("read"), b"hello");
        }
    }

    #[test]
    fn an_unsynced_directory_entry_can_be_lost() {
        let lost = (0..100).any(|seed| {
            let d = SimDisk::new(seed, DiskOptions::default());
            let f = d.open(Path::new("/f"), true, true, true).expect("create");
            f.write(0, &[1; 512]).expect("dsync write");
            d.crash();
            !d.exists(Path::new("/f"))
        });
        assert!(
            lost,
            "a crash sometimes forgets a file whose directory was not fsynced"
        );
    }

    #[test]
    fn a_dsync_write_is_durable_at_once_and_a_buffered_one_can_tear() {
        let mut torn = false;
        for seed in 0..100 {
            let d = SimDisk::new(seed, DiskOptions::default());
            let f = d.open(Path::new("/f"), true, true, true).expect("create");
            d.fsync_dir(Path::new("/")).expect("fsync");
            f.write(0, &[1; 1024]).expect("write");
            let b = d
                .open(Path::new("/f"), false, false, false)
                .expect("buffered");
            b.write(0, &[2; 2048]).expect("write");
            d.crash();
            let got = d.durable_bytes(Path::new("/f")).expect("durable");
            assert!(got.len() >= 1024);
            let twos = got.chunks(SECTOR_BYTES).filter(|s| s[0] == 2).count();
            torn |= twos > 0 && twos < 4;
        }
        assert!(torn, "some crash keeps part of a buffered write");
    }

    #[test]
    fn a_failed_fdatasync_forgets_the_writes_it_was_to_save() {
        let d = disk();
        let f = d.open(Path::new("/f"), true, true, false).expect("create");
        d.fsync_dir(Path::new("/")).expect("fsync");
        f.write(0, b"abc").expect("write");
        d.set_faults(DiskFaults {
            fail_syncs: 1,
            ..DiskFaults::default()
        });
        assert!(f.fdatasync().is_err());
        f.fdatasync().expect("a retry succeeds");
        assert_eq!(f.read(0, 3).expect("read"), b"abc", "reads still see them");
        assert_eq!(d.durable_bytes(Path::new("/f")), Some(Vec::new()));
    }

    #[test]
    fn another_files_sync_makes_overwrites_of_written_blocks_durable_and_nothing_else() {
        let d = disk();
        let a = d
            .open(Path::new("/a"), true, true, false)
            .expect("create a");
        let b = d
            .open(Path::new("/b"), true, true, false)
            .expect("create b");
        d.fsync_dir(Path::new("/")).expect("fsync");
        b.write(0, &[1; 8192]).expect("write b");
        b.set_len(3 * 4096).expect("preallocate b");
        b.fdatasync().expect("sync b");
        // An overwrite of written blocks, then a write into the preallocated block.
        b.write(4096, &[2; 4096]).expect("overwrite");
        b.write(8192, &[3; 4096]).expect("into unwritten");
        a.write(0, b"a").expect("write a");
        a.fdatasync().expect("sync a");
        let durable = d.durable_bytes(Path::new("/b")).expect("b");
        assert_eq!(
            &durable[4096..8192],
            &[2; 4096],
            "the overwrite rode a's flush"
        );
        assert_eq!(
            &durable[8192..],
            &[0; 4096],
            "the unwritten block waits for b's sync"
        );
        // Once b's sync made the block written, a later overwrite rides a's flush.
        b.fdatasync().expect("sync b");
        b.write(8192, &[4; 4096]).expect("overwrite");
        a.fdatasync().expect("sync a");
        let durable = d.durable_bytes(Path::new("/b")).expect("b");
        assert_eq!(&durable[8192..], &[4; 4096]);
    }

    #[test]
    fn a_full_disk_refuses_growth_but_not_overwrites() {
        let d = disk();
        let f = d.open(Path::new("/f"), true, true, false).expect("create");
        f.write(0, &[0; 4096]).expect("write");
        d.set_faults(DiskFaults {
            full: true,
            ..DiskFaults::default()
        });
        let e = f.write(4096, &[1; 4096]).expect_err("grows");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        f.write(0, &[1; 4096]).expect("overwrite");
        assert!(f.set_len(1 << 20).is_err());
    }

    #[test]
    fn a_crash_point_tears_the_operation_and_fails_everything_until_restart() {
        let d = disk();
        let f = d.open(Path::new("/f"), true, true, true).expect("create");
        d.fsync_dir(Path::new("/")).expect("fsync");
        d.crash_after_ops(2);
        f.write(0, &[1; 512]).expect("first op");
        assert!(f.write(512, &[2; 512]).is_err(), "the crash point");
        assert!(d.crashed());
        assert!(d.mkdir(Path::new("/x")).is_err(), "dead until restarted");
        d.crash();
        assert!(!d.crashed());
        let got = d.durable_bytes(Path::new("/f")).expect("durable");
        assert_eq!(&got[..512], &[1; 512][..]);
        d.mkdir(Path::new("/x")).expect("alive again");
    }

    #[test]
    fn remove_dir_all_and_rename_are_durable_after_fsync_of_their_directory() {
        let d = disk();
        d.mkdir(Path::new("/a")).expect("mkdir");
        let f = d
            .open(Path::new("/a/t.tmp"), true, true, false)
            .expect("create");
        f.write(0, b"x").expect("write");
        f.fdatasync().expect("sync");
        d.rename(Path::new("/a/t.tmp"), Path::new("/a/t"))
            .expect("rename");
        d.fsync_dir(Path::new("/a")).expect("fsync a");
        d.fsync_dir(Path::new("/")).expect("fsync root");
        assert_eq!(d.durable_list(Path::new("/a")), vec![PathBuf::from("/a/t")]);
        d.remove_dir_all(Path::new("/a")).expect("rm");
        assert!(!d.exists(Path::new("/a")));
        d.fsync_dir(Path::new("/")).expect("fsync root");
        d.crash();
        assert!(!d.exists(Path::new("/a")));
    }

    #[test]
    fn without_faults_neither_injects_nor_counts() {
        let d = disk();
        d.crash_after_ops(1);
        d.set_faults(DiskFaults {
            read_error_per_mille: 1000,
            ..DiskFaults::default()
        });
        d.without_faults(|| {
            let f = d.open(Path::new("/f"), true, true, false).expect("create");
            f.write(0, b"a").expect("write");
            assert_eq!(f.read(0, 1).expect("read"), b"a");
        });
        assert!(!d.crashed());
    }
}
