//! Fuzz target: see `strand_storage::fuzz::segment_recovery` (on one executor reused for
//! every input, in a directory of this process under the system's temporary directory).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("strand-fuzz-recovery-{}", std::process::id()));
    let _kept =
        strand_storage::io_runtime::block_on_reused(strand_storage::fuzz::segment_recovery(
            &dir, data,
        ))
        .expect("executor starts");
});
