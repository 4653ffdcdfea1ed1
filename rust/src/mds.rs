//! Bulk reads of one column of MDS shards (mosaicml-streaming's format), memory-mapped.
//!
//! An MDS shard file (`shard.NNNNN.mds`, format version 2) is `[num_samples: u32]`,
//! `[offsets: (num_samples + 1) × u32]` (byte offsets of each sample from the file's start), then
//! the samples. A sample is `[size: u32]` for each column without a fixed size, in column
//! order, then every column's bytes in column order. An `ndarray:DTYPE` column without a fixed
//! shape starts with one byte `ndim << 2 | k` and `ndim` dimensions of `1 << k` bytes each, then
//! the values (streaming's `NDArray` encoding, `streaming/base/format/mds/encodings.py`); with a
//! fixed shape (`ndarray:DTYPE:N`) it is the values alone.
//!
//! [`Shards`] maps each shard file once, on first use, and reads a micro-batch's samples in one
//! call: the offsets of each sample straight from the mapped table, its column located by the
//! size header, its values copied into one output buffer. Anything this reader does not
//! expect (a file missing or shorter than its offsets, a sample index beyond the shard, an
//! array that is not 1-D) is reported as [`MdsError`], and the caller reads those samples
//! through streaming itself, which then downloads the shard or raises its own error.
//!
//! A shard file changed on disk while the run reads it is an error, never a crash: the file is
//! mapped only when it has the size `index.json` records; the reads run under a
//! [`crate::sigbus::Guard`], which turns the SIGBUS of a page past the end of a file truncated
//! under the mapping into a flag; and after every call each file it read is checked against
//! what it was when mapped (size, inode, modification time), so that a rewrite of the same size
//! is caught too. Any of these is [`MdsError::Changed`], carrying
//! [`crate::Error::ShardChanged`] for the user.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Instant, SystemTime};

use crate::error::Error;

/// Why a bulk read did not happen (the caller falls back to streaming's per-sample read).
#[derive(Debug, Clone, PartialEq)]
pub enum MdsError {
    /// The shard file is not there (a remote shard not downloaded yet) or cannot be mapped.
    Missing {
        /// The file's index in the [`Shards`] table.
        file: usize,
    },
    /// The bytes do not have the expected layout.
    Malformed {
        /// What was found, naming the file, sample and value.
        reason: String,
    },
    /// A shard file changed on disk since it was mapped (or before, against `index.json`): the
    /// bytes read are not the shard's; never read through streaming instead.
    Changed(Error),
}

/// Where the column to read lives in a sample, and how it is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Each column's fixed size in bytes, `None` for a column with a size header.
    pub sizes: Vec<Option<u32>>,
    /// The index of the column to read.
    pub column: usize,
    /// Bytes per value (1, 2, 4 or 8).
    pub itemsize: usize,
    /// `true` when the column has a fixed shape (no shape header).
    pub fixed_shape: bool,
}

/// One shard file of a stream.
#[derive(Debug, Clone)]
pub struct ShardFile {
    /// The raw `.mds` file.
    pub path: std::path::PathBuf,
    /// Its number of samples (from `index.json`).
    pub num_samples: u32,
    /// Its size in bytes as `index.json` records it, if it does.
    pub bytes: Option<u64>,
}

/// What a shard file was when it was mapped: a later difference means it changed on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    size: u64,
    inode: u64,
    modified: Option<SystemTime>,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Self {
            size: meta.len(),
            inode,
            modified: meta.modified().ok(),
        }
    }

    /// How `now` differs from `self`, or `None`.
    fn change(&self, now: &Self) -> Option<String> {
        if now.size != self.size {
            Some(format!(
                "it has {} bytes, {} when the run opened it",
                now.size, self.size
            ))
        } else if now.inode != self.inode {
            Some("another file was put in its place".into())
        } else if now.modified != self.modified {
            Some("it was rewritten (its modification time moved)".into())
        } else {
            None
        }
    }
}

/// A mapped shard file and its [`Identity`] when mapped.
#[derive(Debug)]
struct Mapped {
    mmap: memmap2::Mmap,
    identity: Identity,
    /// When the file on disk was last found to be `identity` (nanoseconds after [`epoch`]).
    checked_ns: AtomicU64,
}

/// How often, at most, a file that reads cleanly is compared with its [`Identity`] on disk. A
/// `stat` costs several microseconds on a busy VM, as much as a tenth of a micro-batch's whole
/// read, so each file is compared at most this often, and at once after a read that faulted
/// (a truncation) or found malformed bytes. A rewrite that neither shortens the file nor
/// breaks its layout is caught within this interval.
const CHECK_INTERVAL_NS: u64 = 250_000_000;

/// The process's reference instant for [`Mapped::checked_ns`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The shards of several streams, each stream's global sample index spread over its shards.
#[derive(Debug)]
pub struct Shards {
    /// Per stream, its name (in messages).
    names: Vec<String>,
    /// Per stream: the first global sample of each shard, then the total (`shards + 1`).
    starts: Vec<Vec<u64>>,
    /// Per stream: the index of its first shard in `files`.
    first_file: Vec<usize>,
    files: Vec<ShardFile>,
    /// Per stream, its layout (every shard of a stream shares its columns).
    layouts: Vec<Layout>,
    /// The index of the stream of each file.
    stream_of: Vec<usize>,
    /// The mapped files, filled on first use; a read holds a mapping by `Arc`.
    maps: RwLock<Vec<Option<Arc<Mapped>>>>,
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn malformed(reason: String) -> MdsError {
    MdsError::Malformed { reason }
}

/// The bytes of column `layout.column`'s values in sample `sample` of the shard `file`.
///
/// # Errors
/// `Malformed` when the file or the sample does not have the layout's shape.
pub fn column_values<'a>(
    file: &'a [u8],
    sample: u32,
    layout: &Layout,
) -> Result<&'a [u8], MdsError> {
    let s = sample as usize;
    let count = read_u32(file, 0).ok_or_else(|| malformed("no sample count".into()))?;
    if sample >= count {
        return Err(malformed(format!(
            "sample {sample} >= {count} in the shard"
        )));
    }
    let begin = read_u32(file, 4 * (s + 1)).ok_or_else(|| malformed("short offsets".into()))?;
    let end = read_u32(file, 4 * (s + 2)).ok_or_else(|| malformed("short offsets".into()))?;
    let data = file
        .get(begin as usize..end as usize)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| malformed(format!("sample {sample}: bytes {begin}..{end} not in file")))?;
    let mut header = 0usize;
    let mut start = 0usize;
    let mut size = 0usize;
    let variable = layout.sizes.iter().filter(|s| s.is_none()).count();
    for (c, fixed) in layout.sizes.iter().enumerate() {
        let this = if let Some(n) = fixed {
            *n as usize
        } else {
            let n = read_u32(data, header)
                .ok_or_else(|| malformed(format!("sample {sample}: short size header")))?;
            header += 4;
            n as usize
        };
        if c < layout.column {
            start += this;
        } else if c == layout.column {
            size = this;
        }
    }
    let start = 4 * variable + start;
    let column = data
        .get(start..start + size)
        .ok_or_else(|| malformed(format!("sample {sample}: column beyond the sample")))?;
    if layout.fixed_shape {
        return Ok(column);
    }
    let (&byte, rest) = column
        .split_first()
        .ok_or_else(|| malformed(format!("sample {sample}: empty array")))?;
    let (ndim, width) = (byte >> 2, 1usize << (byte & 3));
    if ndim != 1 || rest.len() < width {
        return Err(malformed(format!("sample {sample}: a {ndim}-D array")));
    }
    let mut dim = [0u8; 8];
    dim[..width].copy_from_slice(&rest[..width]);
    let len = u64::from_le_bytes(dim);
    let values = &rest[width..];
    if Some(values.len())
        != usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_mul(layout.itemsize))
    {
        return Err(malformed(format!(
            "sample {sample}: {} bytes for {len} values",
            values.len()
        )));
    }
    Ok(values)
}

impl Shards {
    /// The shards of each stream (`streams[s]`: its name, its files in shard order and its
    /// layout).
    pub fn new(streams: Vec<(String, Vec<ShardFile>, Layout)>) -> Self {
        let mut names = Vec::with_capacity(streams.len());
        let mut starts = Vec::with_capacity(streams.len());
        let mut first_file = Vec::with_capacity(streams.len());
        let mut files = Vec::new();
        let mut stream_of = Vec::new();
        let mut layouts = Vec::with_capacity(streams.len());
        for (name, shards, layout) in streams {
            let mut s = Vec::with_capacity(shards.len() + 1);
            let mut total = 0u64;
            s.push(0);
            for f in &shards {
                total += u64::from(f.num_samples);
                s.push(total);
            }
            stream_of.extend(std::iter::repeat_n(names.len(), shards.len()));
            names.push(name);
            starts.push(s);
            first_file.push(files.len());
            files.extend(shards);
            layouts.push(layout);
        }
        let maps = RwLock::new(vec![None; files.len()]);
        Self {
            names,
            starts,
            first_file,
            files,
            layouts,
            stream_of,
            maps,
        }
    }

    /// [`MdsError::Changed`] for shard `file`.
    fn changed(&self, file: usize, reason: String) -> MdsError {
        MdsError::Changed(Error::ShardChanged {
            stream: self.names[self.stream_of[file]].clone(),
            path: self.files[file].path.display().to_string(),
            reason,
        })
    }

    /// `Changed` when shard `file` on disk is no longer what `mapped` was mapped from.
    fn check(&self, file: usize, mapped: &Mapped) -> Result<(), MdsError> {
        match std::fs::symlink_metadata(&self.files[file].path) {
            Ok(meta) => match mapped.identity.change(&Identity::of(&meta)) {
                None => Ok(()),
                Some(reason) => Err(self.changed(file, reason)),
            },
            Err(err) => Err(self.changed(file, format!("it cannot be read any more: {err}"))),
        }
    }

    fn map(&self, file: usize) -> Result<Arc<Mapped>, MdsError> {
        if let Some(m) = self
            .maps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[file]
            .clone()
        {
            return Ok(m);
        }
        let missing = || MdsError::Missing { file };
        let handle = File::open(&self.files[file].path).map_err(|_| missing())?;
        let identity = Identity::of(&handle.metadata().map_err(|_| missing())?);
        if let Some(expected) = self.files[file].bytes.filter(|&b| b != identity.size) {
            let reason = format!(
                "it has {} bytes, index.json records {expected}",
                identity.size
            );
            return Err(self.changed(file, reason));
        }
        // SAFETY: nothing in this process writes the shard files. Another process may: a file
        // replaced on disk (a re-download) keeps the old inode's pages for this mapping; a file
        // truncated under it is read under a `sigbus::Guard` (a SIGBUS becomes a flag), and every
        // read checks the file against `identity` afterwards (`gather`).
        // Populated at once (one pass over the file's pages instead of a fault per sample read
        // at random), as every shard is read all over within an epoch anyway.
        let mmap = unsafe { memmap2::MmapOptions::new().populate().map(&handle) }
            .map_err(|_| missing())?;
        let mapped = Arc::new(Mapped {
            mmap,
            identity,
            checked_ns: AtomicU64::new(now_ns()),
        });
        self.maps
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[file] = Some(mapped.clone());
        Ok(mapped)
    }

    /// The common value size of the streams of `pairs` (interleaved as in [`Shards::gather`]).
    ///
    /// # Errors
    /// `Malformed` when the streams' value sizes differ or a stream does not exist.
    pub fn itemsize(&self, pairs: &[i64]) -> Result<usize, MdsError> {
        let mut size = None;
        for pair in pairs.chunks_exact(2) {
            let layout = usize::try_from(pair[0])
                .ok()
                .and_then(|s| self.layouts.get(s))
                .ok_or_else(|| malformed(format!("no stream {}", pair[0])))?;
            if size.is_some_and(|s| s != layout.itemsize) {
                return Err(malformed("streams of different value sizes".into()));
            }
            size = Some(layout.itemsize);
        }
        Ok(size.unwrap_or(1))
    }

    /// Forget the mappings of every file (after its shard was removed from a cache).
    pub fn unmap_all(&self) {
        self.maps
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fill(None);
    }

    /// Read the column of `(stream, sample)` pairs (`pairs` interleaved, global sample indices
    /// of each stream), each cut to its first `limit` values, into `out` (values' bytes,
    /// concatenated) and `lengths` (values per sample).
    ///
    /// # Errors
    /// `Missing` or `Malformed` as in the module docs; `Changed` when a shard file this call
    /// read changed on disk (compared after the reads, whatever their outcome: at once after a
    /// fault or an error, else at most every [`CHECK_INTERVAL_NS`] per file). `out` and
    /// `lengths` are then partial.
    pub fn gather(
        &self,
        pairs: &[i64],
        limit: usize,
        out: &mut Vec<u8>,
        lengths: &mut Vec<i64>,
    ) -> Result<(), MdsError> {
        let Some(guard) = crate::sigbus::Guard::new() else {
            return Err(malformed("no SIGBUS guard for this read".into()));
        };
        // every file read, kept mapped until it is checked
        let mut read: Vec<(usize, Arc<Mapped>)> = Vec::new();
        let result = self.gather_guarded(&guard, pairs, limit, out, lengths, &mut read);
        let faulted = guard.faulted();
        drop(guard);
        let now = now_ns();
        for (file, mapped) in &read {
            let due = now.saturating_sub(mapped.checked_ns.load(Ordering::Relaxed));
            if faulted || result.is_err() || due >= CHECK_INTERVAL_NS {
                self.check(*file, mapped)?;
                mapped.checked_ns.store(now, Ordering::Relaxed);
            }
        }
        if faulted {
            // a page past the end of a file: the file shrank, and grew back since
            let file = read.last().map_or(0, |(f, _)| *f);
            return Err(self.changed(file, "it was shortened while being read".into()));
        }
        result
    }

    fn gather_guarded(
        &self,
        guard: &crate::sigbus::Guard,
        pairs: &[i64],
        limit: usize,
        out: &mut Vec<u8>,
        lengths: &mut Vec<i64>,
        read: &mut Vec<(usize, Arc<Mapped>)>,
    ) -> Result<(), MdsError> {
        let mut current: Option<(usize, Arc<Mapped>)> = None;
        for pair in pairs.chunks_exact(2) {
            let bad = || malformed(format!("no sample {pair:?}"));
            let stream = usize::try_from(pair[0]).map_err(|_| bad())?;
            let starts = self.starts.get(stream).ok_or_else(bad)?;
            let index = u64::try_from(pair[1]).map_err(|_| bad())?;
            if index >= starts[starts.len() - 1] {
                return Err(bad());
            }
            let shard = starts.partition_point(|&s| s <= index) - 1;
            let file = self.first_file[stream] + shard;
            let mapped = match &current {
                Some((f, m)) if *f == file => m.clone(),
                _ => {
                    let m = self.map(file)?;
                    if !read.iter().any(|(f, _)| *f == file) {
                        read.push((file, m.clone()));
                    }
                    guard.cover(&m.mmap);
                    current = Some((file, m.clone()));
                    m
                }
            };
            #[allow(
                clippy::cast_possible_truncation,
                reason = "below the shard's u32 count"
            )]
            let local = (index - starts[shard]) as u32;
            let layout = &self.layouts[stream];
            let values = column_values(&mapped.mmap, local, layout)?;
            let n = (values.len() / layout.itemsize).min(limit);
            out.extend_from_slice(&values[..n * layout.itemsize]);
            lengths.push(n as i64);
        }
        Ok(())
    }
}

/// [`collate`]'s padded rows: `input_ids`, `attention_mask` and `labels`, each
/// `rows × seq_len` int64 values, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Padded {
    /// The row length: the longest sample's, at least 1.
    pub seq_len: usize,
    /// Token ids, 0 on padding.
    pub input_ids: Vec<i64>,
    /// 1 on tokens, 0 on padding.
    pub attention_mask: Vec<i64>,
    /// Token ids, `ignore` on padding.
    pub labels: Vec<i64>,
}

/// Right-pad the samples of [`Shards::gather`]'s `values` (little-endian integers of `itemsize`
/// bytes, `signed` or not, widened to int64 as numpy's cast does) to the longest one.
pub fn collate(
    values: &[u8],
    lengths: &[i64],
    itemsize: usize,
    signed: bool,
    ignore: i64,
) -> Padded {
    let seq_len = lengths.iter().copied().max().unwrap_or(0).max(1);
    #[allow(
        clippy::cast_sign_loss,
        clippy::cast_possible_truncation,
        reason = "lengths >= 0"
    )]
    let seq_len = seq_len as usize;
    let total = lengths.len() * seq_len;
    let mut padded = Padded {
        seq_len,
        input_ids: vec![0; total],
        attention_mask: vec![0; total],
        labels: vec![ignore; total],
    };
    let mut at = 0usize;
    for (row, &len) in lengths.iter().enumerate() {
        #[allow(
            clippy::cast_sign_loss,
            clippy::cast_possible_truncation,
            reason = "len >= 0"
        )]
        let len = len as usize;
        let base = row * seq_len;
        let src = &values[at..at + len * itemsize];
        at += len * itemsize;
        for (j, v) in src.chunks_exact(itemsize).enumerate() {
            let mut b = [0u8; 8];
            b[..itemsize].copy_from_slice(v);
            let negative = signed && v[itemsize - 1] & 0x80 != 0;
            if negative {
                b[itemsize..].fill(0xFF);
            }
            #[allow(
                clippy::cast_possible_wrap,
                reason = "numpy's uint64 -> int64 cast wraps too"
            )]
            let x = u64::from_le_bytes(b) as i64;
            padded.input_ids[base + j] = x;
            padded.labels[base + j] = x;
            padded.attention_mask[base + j] = 1;
        }
    }
    padded
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "test shards: small known sizes"
)]
mod tests {
    use super::*;

    /// A shard of `ndarray:int32` samples with a variable `int` column before them.
    fn shard(samples: &[Vec<i32>]) -> Vec<u8> {
        let mut body: Vec<Vec<u8>> = Vec::new();
        for s in samples {
            let mut col = vec![(1u8 << 2) | 2];
            col.extend_from_slice(&(s.len() as u32).to_le_bytes());
            for v in s {
                col.extend_from_slice(&v.to_le_bytes());
            }
            let mut b = Vec::new();
            b.extend_from_slice(&(col.len() as u32).to_le_bytes()); // input_ids: variable
            b.extend_from_slice(&col);
            b.extend_from_slice(&7i64.to_le_bytes()); // a fixed 8-byte column after it
            body.push(b);
        }
        let n = samples.len();
        let mut out = (n as u32).to_le_bytes().to_vec();
        let mut at = 4 + 4 * (n + 1);
        out.extend_from_slice(&(at as u32).to_le_bytes());
        for b in &body {
            at += b.len();
            out.extend_from_slice(&(at as u32).to_le_bytes());
        }
        for b in &body {
            out.extend_from_slice(b);
        }
        out
    }

    fn layout() -> Layout {
        Layout {
            sizes: vec![None, Some(8)],
            column: 0,
            itemsize: 4,
            fixed_shape: false,
        }
    }

    #[test]
    fn reads_and_refuses() {
        let samples = vec![vec![1, 2, 3], vec![4], vec![5, 6]];
        let file = shard(&samples);
        for (i, s) in samples.iter().enumerate() {
            let v = column_values(&file, i as u32, &layout()).unwrap();
            let got: Vec<i32> = v
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(&got, s);
        }
        assert!(column_values(&file, 3, &layout()).is_err());
        assert!(column_values(&file[..20], 2, &layout()).is_err());
        let dir = std::env::temp_dir().join(format!("cds-mds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shard.00000.mds");
        std::fs::write(&path, &file).unwrap();
        let files = vec![
            ShardFile {
                path: path.clone(),
                num_samples: 3,
                bytes: Some(file.len() as u64),
            },
            ShardFile {
                path: dir.join("missing.mds"),
                num_samples: 1,
                bytes: None,
            },
        ];
        let shards = Shards::new(vec![("s".into(), files, layout())]);
        let (mut out, mut lengths) = (Vec::new(), Vec::new());
        shards
            .gather(&[0, 2, 0, 0], 2, &mut out, &mut lengths)
            .unwrap();
        assert_eq!(lengths, vec![2, 2]);
        assert_eq!(out.len(), 16);
        assert_eq!(
            shards.gather(&[0, 3], 8, &mut out, &mut lengths),
            Err(MdsError::Missing { file: 1 })
        );
        assert!(shards.gather(&[0, 4], 8, &mut out, &mut lengths).is_err());
        assert!(shards.gather(&[1, 0], 8, &mut out, &mut lengths).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn changed_reason(result: Result<(), MdsError>) -> String {
        match result {
            Err(MdsError::Changed(Error::ShardChanged {
                stream,
                path,
                reason,
            })) => {
                assert_eq!(stream, "s");
                assert!(
                    std::path::Path::new(&path).ends_with("shard.00000.mds"),
                    "{path}"
                );
                reason
            }
            other => panic!("expected Changed, got {other:?}"),
        }
    }

    /// A shard of three samples of 4000 int32 values each (16 KB: several pages).
    fn big_shard_on_disk(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>, Shards) {
        std::fs::create_dir_all(dir).unwrap();
        let samples: Vec<Vec<i32>> = (0..3).map(|i| vec![i; 4000]).collect();
        let bytes = shard(&samples);
        let path = dir.join("shard.00000.mds");
        std::fs::write(&path, &bytes).unwrap();
        let files = vec![ShardFile {
            path: path.clone(),
            num_samples: 3,
            bytes: Some(bytes.len() as u64),
        }];
        (
            path,
            bytes,
            Shards::new(vec![("s".into(), files, layout())]),
        )
    }

    #[test]
    fn a_shard_truncated_or_rewritten_under_the_mapping_is_changed_not_a_crash() {
        let dir = std::env::temp_dir().join(format!("cds-mds-changed-{}", std::process::id()));
        let (path, _, shards) = big_shard_on_disk(&dir);
        let (mut out, mut lengths) = (Vec::new(), Vec::new());
        shards.gather(&[0, 0], 8, &mut out, &mut lengths).unwrap();
        // shortened in place: the last sample's pages are gone from the mapping (a SIGBUS)
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1000)
            .unwrap();
        let reason = changed_reason(shards.gather(&[0, 2], 8, &mut out, &mut lengths));
        assert!(reason.contains("1000 bytes"), "{reason}");
        // rewritten in place at the same size, bytes and layout intact: caught by the mtime,
        // once the file is due for its comparison
        let (path, bytes, shards) = big_shard_on_disk(&dir.join("rewrite"));
        shards.gather(&[0, 0], 8, &mut out, &mut lengths).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_nanos(CHECK_INTERVAL_NS));
        let reason = changed_reason(shards.gather(&[0, 1], 8, &mut out, &mut lengths));
        assert!(reason.contains("rewritten"), "{reason}");
        // a fresh reader checks the recorded size first
        std::fs::write(&path, &bytes[..2000]).unwrap();
        let (_, _, fresh) = (0, 0, {
            let files = vec![ShardFile {
                path: path.clone(),
                num_samples: 3,
                bytes: Some(bytes.len() as u64),
            }];
            Shards::new(vec![("s".into(), files, layout())])
        });
        let reason = changed_reason(fresh.gather(&[0, 0], 8, &mut out, &mut lengths));
        assert!(reason.contains("index.json records"), "{reason}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn collate_pads_and_widens() {
        let values: Vec<u8> = [-3i16, 7, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = collate(&values, &[2, 0, 1], 2, true, -100);
        assert_eq!(p.seq_len, 2);
        assert_eq!(p.input_ids, vec![-3, 7, 0, 0, 1, 0]);
        assert_eq!(p.attention_mask, vec![1, 1, 0, 0, 1, 0]);
        assert_eq!(p.labels, vec![-3, 7, -100, -100, 1, -100]);
        assert_eq!(
            collate(&[0xFF, 0xFF], &[1], 2, false, -100).input_ids,
            vec![65535]
        );
        assert_eq!(collate(&[], &[], 4, true, -100).seq_len, 1);
    }
}
