//! A small ext4 file system on a loop-mounted image, for tests that fill a disk
//! (`tests/enospc.rs`, `tests/broker_disk_full.rs`). Unmounted on drop, also when the test
//! panics. Needs root, `mkfs.ext4` and loop devices: [`LoopMount::new`] says why not, and
//! [`LoopMount::or_skip`] turns that into a skip, or a failure under
//! `STRAND_REQUIRE_ROOT_TESTS=1` (CI).

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted image; files go under [`LoopMount::point`].
#[derive(Debug)]
pub struct LoopMount {
    /// Where the file system is mounted.
    pub point: PathBuf,
}

impl LoopMount {
    /// Creates an image of `size_bytes` under `root` and mounts it at `root/mnt`; `Err`
    /// says why this machine cannot.
    pub fn new(root: &Path, size_bytes: u64) -> Result<LoopMount, String> {
        let uid = std::fs::metadata("/proc/self")
            .map_err(|e| format!("no /proc: {e}"))?
            .uid();
        if uid != 0 {
            return Err(format!("loop mounts need root (uid {uid})"));
        }
        let image = root.join("fs.img");
        let file = std::fs::File::create(&image).map_err(|e| format!("create image: {e}"))?;
        file.set_len(size_bytes)
            .map_err(|e| format!("size image: {e}"))?;
        // 4 KiB blocks as on a real data disk; no root reserve, so "full" is simply full.
        let args = ["-q", "-F", "-m", "0", "-b", "4096"].map(OsStr::new);
        run("mkfs.ext4", &[&args[..], &[image.as_os_str()]].concat())?;
        let point = root.join("mnt");
        std::fs::create_dir(&point).map_err(|e| format!("create mount point: {e}"))?;
        let args = ["-o", "loop"].map(OsStr::new);
        run(
            "mount",
            &[&args[..], &[image.as_os_str(), point.as_os_str()]].concat(),
        )?;
        Ok(LoopMount { point })
    }

    /// [`LoopMount::new`], or `None` after printing `skipped: <reason>`; panics instead
    /// when `STRAND_REQUIRE_ROOT_TESTS=1`.
    pub fn or_skip(root: &Path, size_bytes: u64) -> Option<LoopMount> {
        match LoopMount::new(root, size_bytes) {
            Ok(m) => Some(m),
            Err(reason) if std::env::var("STRAND_REQUIRE_ROOT_TESTS").is_ok_and(|v| v == "1") => {
                panic!("{reason} (and STRAND_REQUIRE_ROOT_TESTS=1)")
            }
            Err(reason) => {
                eprintln!("skipped: {reason}");
                None
            }
        }
    }

    /// Writes `size_bytes` to `name` under the mount point and syncs it: deleting it
    /// later ([`LoopMount::free`]) is what "space returns" means.
    pub fn fill(&self, name: &str, size_bytes: usize) -> PathBuf {
        let path = self.point.join(name);
        std::fs::write(&path, vec![0x5a; size_bytes]).expect("write filler");
        std::fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .expect("sync filler");
        path
    }

    /// Deletes `filler` and commits the unlink, so the freed blocks are allocatable now
    /// rather than after ext4's next journal commit.
    pub fn free(&self, filler: &Path) {
        std::fs::remove_file(filler).expect("delete filler");
        std::fs::File::open(&self.point)
            .and_then(|d| d.sync_all())
            .expect("sync mount point");
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.point).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // Busy (a file still open after a panic): detach lazily so the loop device and
            // the image are released as soon as the last file closes.
            let lazy = Command::new("umount").arg("-l").arg(&self.point).status();
            eprintln!(
                "umount {} failed; lazy umount: {lazy:?}",
                self.point.display()
            );
        }
    }
}

/// Runs `program args`; `Err` carries why it did not succeed.
fn run(program: &str, args: &[&OsStr]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{program} {args:?} failed ({}): {err}", out.status));
    }
    Ok(())
}
