//! The two BPF system calls a reader needs (no libbpf: a program using a
//! table links nothing but libc).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// `union bpf_attr` as BPF_OBJ_GET reads it.
#[repr(C, align(8))]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    _pad: u32,
}

/// `union bpf_attr` as BPF_OBJ_GET_INFO_BY_FD reads it.
#[repr(C, align(8))]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_map_info` (the kernel fills what fits).
#[repr(C, align(8))]
#[derive(Default)]
pub(crate) struct MapInfo {
    pub map_type: u32,
    pub id: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub name: [u8; 16],
}

impl MapInfo {
    pub(crate) fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(self.name.len());
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    pub(crate) fn is_oncpu_table(&self) -> bool {
        self.map_type == BPF_MAP_TYPE_ARRAY
            && self.key_size == 4
            && self.value_size == 8
            && self.max_entries as usize == crate::SLOTS
            && self.map_flags & BPF_F_MMAPABLE != 0
            && self.name() == crate::MAP_NAME
    }
}

fn bpf<T>(command: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, zero-padded bpf_attr of the given size for
    // this command; the kernel reads (and for info, writes) only within it.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, command, attr as *mut T, std::mem::size_of::<T>()) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Opens a pinned BPF object read-write (mapping needs a writable
/// descriptor).
pub(crate) fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut attr = ObjGetAttr { pathname: path.as_ptr() as u64, ..Default::default() };
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The kernel's description of the map behind `fd` (an error if it is not
/// a BPF map).
pub(crate) fn map_info(fd: BorrowedFd<'_>) -> io::Result<MapInfo> {
    let mut info = MapInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<MapInfo>() as u32,
        info: &mut info as *mut MapInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}
