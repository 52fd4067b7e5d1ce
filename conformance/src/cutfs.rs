//! A file system that keeps only what was synced: the power-loss layer under the real engines.
//!
//! [`CutFs`] is a FUSE file system held in this process's memory. Every file has two contents:
//! what a reader sees now, and what a power cut would leave, which moves up to the current
//! content only when the file is synced (`fsync` or `fdatasync` of any handle of it). A
//! [`CutImage`] taken at any moment is the disk as a power cut at that moment would leave it:
//! each file's synced content, and in a torn image also a random subset of the writes made to
//! it since its last sync (a disk that wrote back some pages of its cache and not others).
//!
//! What it models, like LazyFS: the loss of a file's unsynced data. Directory operations
//! (create, rename, link, unlink, mkdir, truncate) are durable at once, as on a journaling file
//! system that orders its metadata; a sync of a directory is accepted and changes nothing.
//! `sync_file_range(2)` never reaches a FUSE file system, so data it wrote is unsynced here: it
//! is no durability barrier (it flushes neither the disk's cache nor the file's metadata).
//!
//! Requests are served one at a time (one session thread), each under the state's lock, so an
//! image taken between two requests is exact: the cut falls between two of the engine's
//! system calls. After [`Mounted::freeze`] every request fails with `EIO`, as a disk that lost
//! its power answers nothing.
//!
//! Linux only; mounting needs `/dev/fuse` and the right to mount (root here and in CI).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Bytes per shared piece of a file's content: a sync shares pieces, a write copies only the
/// pieces it touches.
const PIECE: usize = 64 * 1024;

/// The name, in the mount's root, of a file that is never part of an image: the observer's
/// channel (a crash child appends its acknowledgements there, in order with its other
/// requests). [`CutImage::observed`] holds its current content.
pub const OBSERVED: &str = "acks";

/// How long the kernel may keep names and attributes: nothing else changes them.
const TTL: Duration = Duration::from_secs(1);

/// A file's bytes, in shared pieces.
#[derive(Clone, Default)]
pub struct Content {
    len: u64,
    pieces: Vec<Arc<Vec<u8>>>,
}

impl Content {
    fn from_bytes(bytes: &[u8]) -> Content {
        let mut c = Content::default();
        c.write(0, bytes);
        c
    }

    /// The content's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the content is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn read(&self, offset: u64, size: usize) -> Vec<u8> {
        let end = (offset + size as u64).min(self.len);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let piece = &self.pieces[(at / PIECE as u64) as usize];
            let from = (at % PIECE as u64) as usize;
            let take = (PIECE - from).min((end - at) as usize);
            out.extend_from_slice(&piece[from..from + take]);
            at += take as u64;
        }
        out
    }

    /// The whole content.
    pub fn to_vec(&self) -> Vec<u8> {
        self.read(0, self.len as usize)
    }

    fn grow_pieces(&mut self, len: u64) {
        let need = len.div_ceil(PIECE as u64) as usize;
        while self.pieces.len() < need {
            self.pieces.push(Arc::new(vec![0; PIECE]));
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        self.grow_pieces(end);
        let mut at = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let piece = Arc::make_mut(&mut self.pieces[(at / PIECE as u64) as usize]);
            let from = (at % PIECE as u64) as usize;
            let take = (PIECE - from).min(rest.len());
            piece[from..from + take].copy_from_slice(&rest[..take]);
            rest = &rest[take..];
            at += take as u64;
        }
        self.len = self.len.max(end);
    }

    fn set_len(&mut self, len: u64) {
        if len < self.len {
            self.pieces.truncate(len.div_ceil(PIECE as u64) as usize);
            // Bytes past the end read as zeros if the file grows again.
            let tail = (len % PIECE as u64) as usize;
            if tail != 0 {
                if let Some(last) = self.pieces.last_mut() {
                    Arc::make_mut(last)[tail..].fill(0);
                }
            }
        } else {
            self.grow_pieces(len);
        }
        self.len = len;
    }
}

enum Kind {
    File {
        /// What a reader sees.
        now: Content,
        /// What a power cut leaves.
        synced: Content,
        /// Writes since the last sync: (offset, length).
        unsynced: Vec<(u64, u64)>,
    },
    Dir {
        entries: BTreeMap<OsString, u64>,
    },
}

struct Node {
    kind: Kind,
    nlink: u32,
    perm: u16,
    mtime: SystemTime,
}

/// The disk as a power cut left it, and what the observer had written by then.
#[derive(Clone, Default)]
pub struct CutImage {
    /// Folders, parents before children (relative paths).
    pub dirs: Vec<PathBuf>,
    /// Files and what of them survived (relative paths).
    pub files: Vec<(PathBuf, Content)>,
    /// The current content of the [`OBSERVED`] file at the cut.
    pub observed: Vec<u8>,
    /// Whether unsynced writes were kept in part (a torn image) or all lost.
    pub torn: bool,
    /// Requests served before the cut since the mount.
    pub requests: u64,
}

impl CutImage {
    /// The content of a real folder (an image of a store written without this layer).
    pub fn read_folder(root: &Path) -> std::io::Result<CutImage> {
        fn walk(root: &Path, rel: &Path, image: &mut CutImage) -> std::io::Result<()> {
            let mut entries: Vec<_> =
                std::fs::read_dir(root.join(rel))?.collect::<std::io::Result<_>>()?;
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = rel.join(e.file_name());
                if e.file_type()?.is_dir() {
                    image.dirs.push(path.clone());
                    walk(root, &path, image)?;
                } else {
                    let bytes = std::fs::read(root.join(&path))?;
                    image.files.push((path, Content::from_bytes(&bytes)));
                }
            }
            Ok(())
        }
        let mut image = CutImage::default();
        walk(root, Path::new(""), &mut image)?;
        Ok(image)
    }

    /// Write the image into `root` (an empty or missing folder).
    pub fn write_folder(&self, root: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(root)?;
        for d in &self.dirs {
            std::fs::create_dir_all(root.join(d))?;
        }
        for (path, content) in &self.files {
            std::fs::write(root.join(path), content.to_vec())?;
        }
        Ok(())
    }

    /// Bytes in all files of the image.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, c)| c.len()).sum()
    }
}

struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    frozen: bool,
    requests: u64,
    rng: StdRng,
    /// Request numbers at which an image is taken by the file system itself (ascending).
    scheduled: Vec<u64>,
    /// Images taken at those requests.
    taken: Vec<CutImage>,
    /// The observer file's inode, once created.
    observed_ino: Option<u64>,
    /// The request that first wrote to the observer file.
    first_observed: Option<u64>,
    /// What each request that changes the disk did, one line each (for a failure's report).
    trace: Vec<String>,
}

const ROOT: u64 = 1;

impl State {
    fn new(from: &CutImage, seed: u64) -> State {
        let mut s = State {
            nodes: HashMap::new(),
            next_ino: ROOT + 1,
            frozen: false,
            requests: 0,
            rng: StdRng::seed_from_u64(seed),
            scheduled: Vec::new(),
            taken: Vec::new(),
            observed_ino: None,
            first_observed: None,
            trace: Vec::new(),
        };
        s.nodes.insert(ROOT, Node::dir(0o755));
        for d in &from.dirs {
            let parent = s.resolve_parent(d);
            s.add(parent, d.file_name().unwrap_or_default(), Node::dir(0o755));
        }
        for (path, content) in &from.files {
            let parent = s.resolve_parent(path);
            let mut node = Node::file(0o644);
            if let Kind::File { now, synced, .. } = &mut node.kind {
                *now = content.clone();
                *synced = content.clone();
            }
            let ino = s.add(parent, path.file_name().unwrap_or_default(), node);
            s.note(|| format!("start {} ino {ino} len {}", path.display(), content.len()));
        }
        s
    }

    /// Note what request `self.requests` did.
    fn note(&mut self, what: impl FnOnce() -> String) {
        let line = format!("{} {}", self.requests, what());
        self.trace.push(line);
    }

    fn resolve_parent(&self, path: &Path) -> u64 {
        let mut ino = ROOT;
        if let Some(parent) = path.parent() {
            for part in parent.components() {
                ino = self.child(ino, part.as_os_str()).unwrap_or(ROOT);
            }
        }
        ino
    }

    fn add(&mut self, parent: u64, name: &OsStr, node: Node) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        if let Some(Node {
            kind: Kind::Dir { entries },
            ..
        }) = self.nodes.get_mut(&parent)
        {
            entries.insert(name.to_owned(), ino);
        }
        ino
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<u64> {
        match &self.nodes.get(&parent)?.kind {
            Kind::Dir { entries } => entries.get(name).copied(),
            Kind::File { .. } => None,
        }
    }

    fn entries_mut(&mut self, dir: u64) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match self.nodes.get_mut(&dir).map(|n| &mut n.kind) {
            Some(Kind::Dir { entries }) => Ok(entries),
            Some(Kind::File { .. }) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let n = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let (kind, size) = match &n.kind {
            Kind::File { now, .. } => (FileType::RegularFile, now.len()),
            Kind::Dir { entries } => (FileType::Directory, entries.len() as u64),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: UNIX_EPOCH,
            kind,
            perm: n.perm,
            nlink: n.nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Drop a name's link to its node; the node goes when no name is left (open handles of
    /// an unlinked file are not kept: no engine here reads a file it unlinked).
    fn unlink_node(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.nlink = n.nlink.saturating_sub(1);
            if n.nlink == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    fn image(&mut self, torn: bool) -> CutImage {
        let mut image = CutImage {
            torn,
            requests: self.requests,
            ..CutImage::default()
        };
        let mut stack = vec![(ROOT, PathBuf::new())];
        while let Some((dir, rel)) = stack.pop() {
            let Some(Node {
                kind: Kind::Dir { entries },
                ..
            }) = self.nodes.get(&dir)
            else {
                continue;
            };
            for (name, ino) in entries {
                let path = rel.join(name);
                match self.nodes.get(ino).map(|n| &n.kind) {
                    Some(Kind::Dir { .. }) => {
                        image.dirs.push(path.clone());
                        stack.push((*ino, path));
                    }
                    Some(Kind::File {
                        now,
                        synced,
                        unsynced,
                    }) => {
                        if dir == ROOT && name == OBSERVED {
                            image.observed = now.to_vec();
                            continue;
                        }
                        let mut kept = synced.clone();
                        if torn {
                            for &(offset, len) in unsynced {
                                if self.rng.random_bool(0.5) {
                                    let end = (offset + len).min(now.len());
                                    if end > offset {
                                        kept.write(
                                            offset,
                                            &now.read(offset, (end - offset) as usize),
                                        );
                                    }
                                }
                            }
                        }
                        image.files.push((path, kept));
                    }
                    None => {}
                }
            }
        }
        image.dirs.sort_by_key(|p| p.components().count());
        image
    }
}

impl Node {
    fn dir(perm: u16) -> Node {
        Node {
            kind: Kind::Dir {
                entries: BTreeMap::new(),
            },
            nlink: 2,
            perm,
            mtime: SystemTime::now(),
        }
    }

    fn file(perm: u16) -> Node {
        Node {
            kind: Kind::File {
                now: Content::default(),
                synced: Content::default(),
                unsynced: Vec::new(),
            },
            nlink: 1,
            perm,
            mtime: SystemTime::now(),
        }
    }
}

/// The file system served to the kernel; its state is shared with the [`Mounted`] handle.
pub struct CutFs {
    state: Arc<Mutex<State>>,
}

impl CutFs {
    /// The state for one request: `EIO` once frozen.
    fn serve(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.frozen {
            return Err(Errno::EIO);
        }
        s.requests += 1;
        if s.scheduled.first() == Some(&s.requests) {
            s.scheduled.remove(0);
            let torn = s.rng.random_bool(0.5);
            let image = s.image(torn);
            s.taken.push(image);
        }
        Ok(s)
    }
}

fn perm_of(mode: u32) -> u16 {
    (mode & 0o7777) as u16
}

impl Filesystem for CutFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.serve().and_then(|s| {
            let ino = s.child(parent.0, name).ok_or(Errno::ENOENT)?;
            s.attr(ino)
        });
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.serve().and_then(|s| s.attr(ino.0)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.serve().and_then(|mut s| {
            let n = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if let Some(m) = mode {
                n.perm = perm_of(m);
            }
            if let Some(len) = size {
                let Kind::File {
                    now,
                    synced,
                    unsynced,
                } = &mut n.kind
                else {
                    return Err(Errno::EISDIR);
                };
                // A size change is metadata: durable at once.
                now.set_len(len);
                synced.set_len(len);
                unsynced.retain(|(o, _)| *o < len);
                n.mtime = SystemTime::now();
                s.note(|| format!("truncate ino {} to {len}", ino.0));
            }
            s.attr(ino.0)
        });
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.serve().and_then(|mut s| {
            if s.entries_mut(parent.0)?.contains_key(name) {
                return Err(Errno::EEXIST);
            }
            let ino = s.add(parent.0, name, Node::dir(perm_of(mode)));
            s.attr(ino)
        });
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.serve().and_then(|mut s| {
            let ino = s.child(parent.0, name).ok_or(Errno::ENOENT)?;
            if matches!(s.nodes.get(&ino).map(|n| &n.kind), Some(Kind::Dir { .. })) {
                return Err(Errno::EISDIR);
            }
            s.entries_mut(parent.0)?.remove(name);
            s.unlink_node(ino);
            s.note(|| format!("unlink {} ino {ino}", name.to_string_lossy()));
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.serve().and_then(|mut s| {
            let ino = s.child(parent.0, name).ok_or(Errno::ENOENT)?;
            match s.nodes.get(&ino).map(|n| &n.kind) {
                Some(Kind::Dir { entries }) if entries.is_empty() => {}
                Some(Kind::Dir { .. }) => return Err(Errno::ENOTEMPTY),
                _ => return Err(Errno::ENOTDIR),
            }
            s.entries_mut(parent.0)?.remove(name);
            s.nodes.remove(&ino);
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.serve().and_then(|mut s| {
            let ino = s.child(parent.0, name).ok_or(Errno::ENOENT)?;
            let replaced = s.child(newparent.0, newname);
            if replaced.is_some() && flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if replaced == Some(ino) {
                return Ok(());
            }
            if let Some(old) = replaced {
                match s.nodes.get(&old).map(|n| &n.kind) {
                    Some(Kind::Dir { entries }) if !entries.is_empty() => {
                        return Err(Errno::ENOTEMPTY)
                    }
                    Some(Kind::Dir { .. }) => {
                        s.nodes.remove(&old);
                    }
                    _ => s.unlink_node(old),
                }
            }
            s.entries_mut(parent.0)?.remove(name);
            s.entries_mut(newparent.0)?.insert(newname.to_owned(), ino);
            s.note(|| {
                format!(
                    "rename {} -> {} ino {ino} (replacing {replaced:?})",
                    name.to_string_lossy(),
                    newname.to_string_lossy()
                )
            });
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.serve().and_then(|mut s| {
            if s.child(newparent.0, newname).is_some() {
                return Err(Errno::EEXIST);
            }
            let n = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if matches!(n.kind, Kind::Dir { .. }) {
                return Err(Errno::EPERM);
            }
            n.nlink += 1;
            s.entries_mut(newparent.0)?
                .insert(newname.to_owned(), ino.0);
            s.note(|| format!("link {} ino {}", newname.to_string_lossy(), ino.0));
            s.attr(ino.0)
        });
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.serve().and_then(|mut s| {
            let n = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if flags.0 & libc::O_TRUNC != 0 {
                if let Kind::File {
                    now,
                    synced,
                    unsynced,
                } = &mut n.kind
                {
                    now.set_len(0);
                    synced.set_len(0);
                    unsynced.clear();
                }
                s.note(|| format!("open O_TRUNC ino {}", ino.0));
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.serve().and_then(|mut s| {
            if let Some(ino) = s.child(parent.0, name) {
                if flags & libc::O_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                return s.attr(ino);
            }
            s.entries_mut(parent.0)?;
            let ino = s.add(parent.0, name, Node::file(perm_of(mode)));
            s.note(|| format!("create {} ino {ino}", name.to_string_lossy()));
            if parent.0 == ROOT && name == OBSERVED {
                s.observed_ino = Some(ino);
            }
            s.attr(ino)
        });
        match r {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self
            .serve()
            .and_then(|s| match &s.nodes.get(&ino.0).map(|n| &n.kind) {
                Some(Kind::File { now, .. }) => Ok(now.read(offset, size as usize)),
                Some(Kind::Dir { .. }) => Err(Errno::EISDIR),
                None => Err(Errno::ENOENT),
            });
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.serve().and_then(|mut s| {
            if s.observed_ino == Some(ino.0) && s.first_observed.is_none() {
                s.first_observed = Some(s.requests);
            }
            let n = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            let Kind::File { now, unsynced, .. } = &mut n.kind else {
                return Err(Errno::EISDIR);
            };
            now.write(offset, data);
            unsynced.push((offset, data.len() as u64));
            n.mtime = SystemTime::now();
            s.note(|| format!("write ino {} at {offset} len {}", ino.0, data.len()));
            Ok(data.len() as u32)
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) is no sync.
        match self.serve() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.serve().and_then(|mut s| {
            let n = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if let Kind::File {
                now,
                synced,
                unsynced,
            } = &mut n.kind
            {
                *synced = now.clone();
                unsynced.clear();
                let len = now.len();
                s.note(|| format!("fsync ino {} len {len}", ino.0));
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self
            .serve()
            .and_then(|s| match s.nodes.get(&ino.0).map(|n| &n.kind) {
                Some(Kind::Dir { .. }) => Ok(()),
                Some(Kind::File { .. }) => Err(Errno::ENOTDIR),
                None => Err(Errno::ENOENT),
            });
        match r {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.serve().and_then(|s| {
            let Some(Kind::Dir { entries }) = s.nodes.get(&ino.0).map(|n| &n.kind) else {
                return Err(Errno::ENOTDIR);
            };
            let mut list = vec![
                (ino.0, FileType::Directory, OsString::from(".")),
                (ROOT, FileType::Directory, OsString::from("..")),
            ];
            for (name, child) in entries {
                let kind = match s.nodes.get(child).map(|n| &n.kind) {
                    Some(Kind::Dir { .. }) => FileType::Directory,
                    _ => FileType::RegularFile,
                };
                list.push((*child, kind, name.clone()));
            }
            Ok(list)
        });
        match r {
            Ok(list) => {
                for (i, (child, kind, name)) in list.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory changes are durable at once (see the module's docs).
        match self.serve() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.serve() {
            Ok(_) => reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        match self.serve() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// A [`CutFs`] mounted on a folder; unmounted when dropped.
pub struct Mounted {
    state: Arc<Mutex<State>>,
    session: Option<fuser::BackgroundSession>,
    at: PathBuf,
}

impl Mounted {
    /// Mount a file system holding `from` (its content synced) on the empty folder `at`;
    /// `seed` drives which unsynced writes a torn image keeps. The file system itself takes an
    /// image just before serving each request whose number (counted from 1 since the mount)
    /// is in `at_requests` (see [`Mounted::scheduled_images`]).
    pub fn mount(
        at: &Path,
        from: &CutImage,
        seed: u64,
        mut at_requests: Vec<u64>,
    ) -> std::io::Result<Mounted> {
        let mut state = State::new(from, seed);
        at_requests.sort_unstable();
        at_requests.dedup();
        state.scheduled = at_requests;
        let state = Arc::new(Mutex::new(state));
        let fs = CutFs {
            state: state.clone(),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName("rocklake-cutfs".into()),
            MountOption::NoAtime,
        ];
        let session = fuser::spawn_mount(fs, at, &config)?;
        Ok(Mounted {
            state,
            session: Some(session),
            at: at.to_path_buf(),
        })
    }

    /// The folder it is mounted on.
    pub fn path(&self) -> &Path {
        &self.at
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The disk as a power cut now would leave it (the writer goes on).
    pub fn image(&self, torn: bool) -> CutImage {
        self.lock().image(torn)
    }

    /// The images taken at the requests [`Mounted::mount`] was given, so far.
    pub fn scheduled_images(&self) -> Vec<CutImage> {
        std::mem::take(&mut self.lock().taken)
    }

    /// The number of the request that first wrote to the [`OBSERVED`] file, if any did.
    pub fn first_observed_request(&self) -> Option<u64> {
        self.lock().first_observed
    }

    /// What each request that changed the disk did so far, one line each (request number
    /// first): for the report of a failed check.
    pub fn trace(&self) -> Vec<String> {
        self.lock().trace.clone()
    }

    /// Cut the power: the image now, and every later request fails with `EIO`.
    pub fn freeze(&self, torn: bool) -> CutImage {
        let mut s = self.lock();
        let image = s.image(torn);
        s.frozen = true;
        image
    }

    /// Unmount (waits for the session's thread).
    pub fn unmount(mut self) -> std::io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match session.umount_and_join() {
            // The kernel may end the connection as aborted when it unmounts with a request
            // still queued (the killed child's last): the session thread then ends with
            // `ECONNABORTED`. Every image was taken before; the mount is gone.
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) && !is_mount_point(&self.at) => {
                Ok(())
            }
            other => other,
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// Whether `path` is a mount point now (by `/proc/self/mountinfo`; `true` when that cannot
/// be read, so that a caller assumes the worst).
fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let wanted = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(m) == wanted)
}

/// Whether this process can mount a [`CutFs`]: `/dev/fuse` is there and the process may open it.
pub fn available() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(|_| ())
        .map_err(|e| format!("cannot open /dev/fuse ({e}): the power-loss layer needs FUSE"))
}
