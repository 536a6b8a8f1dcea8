//! Names for addresses, resolved inside the process when the profile is
//! written (the mappings are exactly right then, dlopen'ed objects
//! included): a lock's address becomes the global or static variable it
//! is (`cache_lock`, from the ELF symbol table, static symbols included),
//! a call site becomes `function+0xoff` and, with debug information,
//! `file:line`.

use object::{Object, ObjectSymbol, SymbolKind};
use std::borrow::Cow;
use std::cell::OnceCell;

struct Module {
    path: String,
    bias: u64,
    segments: Vec<(u64, u64)>,
    symbols: OnceCell<Vec<Symbol>>,
    lines: OnceCell<Option<addr2line::Loader>>,
}

struct Symbol {
    address: u64,
    size: u64,
    /// As the symbol table spells it (mangled): demangled when it is
    /// named in a profile. Demangling every symbol of every object as
    /// they were read took rustc's and node's exits 0.6-2.5 s.
    name: String,
    code: bool,
}

/// What is known about a code address.
#[derive(Default, Debug, Clone)]
pub struct CodeSite {
    pub name: String,
    pub object: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// The loaded objects of this process.
pub struct Symbolizer {
    modules: Vec<Module>,
}

/// The loaded objects as `dl_iterate_phdr` shows them, copied into room
/// reserved beforehand: its callback runs under the loader's lock, and
/// must not allocate there. A periodic dump that allocated in it, stuck
/// on the allocator's lock that a thread killed inside `malloc` held,
/// kept the loader's lock, and the final write, which lists the objects
/// too, waited for it until the watchdog ended the program.
struct Loaded {
    /// Per object: its name's end in `names`, its bias, its loadable
    /// segments' end in `segments`.
    objects: Vec<(usize, u64, usize)>,
    names: Vec<u8>,
    segments: Vec<(u64, u64)>,
    /// The room ran out: collect again with more.
    short: bool,
}

impl Loaded {
    fn with_room(objects: usize) -> Loaded {
        Loaded { objects: Vec::with_capacity(objects), names: Vec::with_capacity(objects * 128), segments: Vec::with_capacity(objects * 8), short: false }
    }

    fn room_for(&self, name: usize, segments: usize) -> bool {
        self.objects.len() < self.objects.capacity()
            && self.names.capacity() - self.names.len() >= name
            && self.segments.capacity() - self.segments.len() >= segments
    }
}

unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info, and `data` is the
    // `Loaded` handed to it below.
    let (info, loaded) = unsafe { (&*info, &mut *data.cast::<Loaded>()) };
    let name = if info.dlpi_name.is_null() {
        &[][..]
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    // SAFETY: dlpi_phdr has dlpi_phnum entries.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    if !loaded.room_for(name.len(), headers.len()) {
        loaded.short = true;
        return 1;
    }
    // (Within the reserved capacity: no allocation.)
    loaded.names.extend_from_slice(name);
    loaded.segments.extend(headers.iter().filter(|h| h.p_type == libc::PT_LOAD).map(|h| (h.p_vaddr, h.p_vaddr + h.p_memsz)));
    loaded.objects.push((loaded.names.len(), info.dlpi_addr, loaded.segments.len()));
    0
}

fn load_symbols(path: &str) -> Vec<Symbol> {
    // Mapped, not read: only the symbol tables' pages are touched (read
    // whole, a 1 GB executable grew the profiled process by 1 GB as it
    // wrote its profile).
    let Ok(file) = std::fs::File::open(path) else { return Vec::new() };
    // SAFETY: a read-only private mapping of a loaded module's file, read
    // for as long as this function runs; a loaded executable cannot be
    // written (ETXTBSY), and a library truncated meanwhile is the one case
    // in which reading it faults.
    let Ok(data) = (unsafe { memmap2::Mmap::map(&file) }) else { return Vec::new() };
    let Ok(file) = object::File::parse(&*data) else { return Vec::new() };
    let mut symbols: Vec<Symbol> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.is_definition() && matches!(s.kind(), SymbolKind::Text | SymbolKind::Data | SymbolKind::Tls))
        .filter_map(|s| {
            let name = s.name().ok()?;
            (!name.is_empty()).then(|| Symbol {
                address: s.address(),
                size: s.size(),
                name: name.to_string(),
                code: s.kind() == SymbolKind::Text,
            })
        })
        .collect();
    symbols.sort_by_key(|s| (s.address, std::cmp::Reverse(s.size)));
    symbols.dedup_by_key(|s| s.address);
    symbols
}

/// A symbol's name for people: demangled if it is mangled (C++ and Rust
/// names start with `_Z` or `_R`); any other name as it is. A demangler
/// given a plain C name may read it as a mangled type: a global mutex
/// named `m` came out as `unsigned long` (the Itanium code of that type).
fn readable_name(name: &str) -> String {
    if name.starts_with("_Z") || name.starts_with("_R") {
        addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
    } else {
        name.to_string()
    }
}

impl Module {
    fn contains(&self, svma: u64) -> bool {
        self.segments.iter().any(|&(start, end)| svma >= start && svma < end)
    }

    /// The symbol `svma` falls in, by its readable name, and the offset.
    fn symbol(&self, svma: u64, code: bool) -> Option<(String, u64)> {
        let symbols = self.symbols.get_or_init(|| load_symbols(&self.path));
        let index = symbols.partition_point(|s| s.address <= svma).checked_sub(1)?;
        let symbol = &symbols[index];
        let inside = svma < symbol.address + symbol.size.max(1) || (code && symbol.code && symbol.size == 0);
        (inside && symbol.code == code).then(|| (readable_name(&symbol.name), svma - symbol.address))
    }
}

impl Symbolizer {
    /// The objects loaded now.
    pub fn new() -> Symbolizer {
        let mut symbols = Symbolizer { modules: Vec::new() };
        symbols.refresh();
        symbols
    }

    /// Brought up to the objects loaded now. An object still loaded where
    /// it was keeps what was read of it (its symbols, its debug
    /// information): read afresh, a 44 MB executable's took 60-130 ms of
    /// every periodic dump.
    pub fn refresh(&mut self) {
        let mut room = 64;
        let loaded = loop {
            let mut loaded = Loaded::with_room(room);
            // SAFETY: `collect` matches the callback type and only touches
            // the `Loaded` passed as data, which outlives the call.
            unsafe { libc::dl_iterate_phdr(Some(collect), (&mut loaded as *mut Loaded).cast()) };
            if !loaded.short {
                break loaded;
            }
            room *= 2;
        };
        let mut known = std::mem::take(&mut self.modules);
        let (mut name_start, mut segments_start) = (0, 0);
        for (index, &(name_end, bias, segments_end)) in loaded.objects.iter().enumerate() {
            let name = String::from_utf8_lossy(&loaded.names[name_start..name_end]).into_owned();
            let segments = loaded.segments[segments_start..segments_end].to_vec();
            (name_start, segments_start) = (name_end, segments_end);
            // The main program comes first, unnamed.
            let path = if name.is_empty() && index == 0 {
                std::fs::read_link(super::this_process("exe")).map(|p| p.display().to_string()).unwrap_or_default()
            } else {
                name
            };
            if path.is_empty() {
                continue;
            }
            let module = match known.iter().position(|m| m.path == path && m.bias == bias && m.segments == segments) {
                Some(same) => known.swap_remove(same),
                None => Module { path, bias, segments, symbols: OnceCell::new(), lines: OnceCell::new() },
            };
            self.modules.push(module);
        }
    }

    /// Whether `address` lies in the object loaded at `bias` (the
    /// loader's `l_addr` of it).
    pub fn in_object_at(&self, bias: u64, address: usize) -> bool {
        self.modules.iter().any(|m| m.bias == bias && m.contains((address as u64).wrapping_sub(m.bias)))
    }

    /// Whether an object is loaded at `bias`.
    pub fn has_object_at(&self, bias: u64) -> bool {
        self.modules.iter().any(|m| m.bias == bias)
    }

    fn module(&self, address: u64) -> Option<(&Module, u64)> {
        self.modules.iter().find_map(|m| {
            let svma = address.wrapping_sub(m.bias);
            m.contains(svma).then_some((m, svma))
        })
    }

    /// The variable a lock at `address` is, if it is a global or static:
    /// its symbol, or in an object without one there (stripped), the
    /// object and the address in it (`static@git+0x38b840`: it read as a
    /// lock on the heap).
    pub fn data(&self, address: usize) -> Option<String> {
        let (module, svma) = self.module(address as u64)?;
        Some(match module.symbol(svma, false) {
            Some((name, 0)) => name,
            Some((name, offset)) => format!("{name}+{offset:#x}"),
            None => format!("static@{}+{svma:#x}", module.path.rsplit('/').next().unwrap_or("?")),
        })
    }

    /// The call site whose return address is `pc`.
    pub fn code(&self, pc: usize) -> CodeSite {
        let Some((module, svma)) = self.module(pc as u64) else {
            return CodeSite { name: format!("{pc:#x}"), ..CodeSite::default() };
        };
        let object = module.path.rsplit('/').next().map(str::to_string);
        let name = match module.symbol(svma.saturating_sub(1), true) {
            Some((name, offset)) => format!("{name}+{:#x}", offset + 1),
            None => format!("{}+{svma:#x}", object.as_deref().unwrap_or("?")),
        };
        let lines = module.lines.get_or_init(|| addr2line::Loader::new(&module.path).ok());
        // The return address is the instruction after the call: look up
        // the byte before it, which is the call.
        let location = lines.as_ref().and_then(|l| program_location(l, svma.saturating_sub(1)));
        CodeSite { name, object, file: location.as_ref().map(|(file, _)| file.clone()), line: location.and_then(|(_, line)| line) }
    }
}

/// The program's own source line of the call at `address`: through the
/// functions inlined there, innermost first, the first not from a system
/// or toolchain header. A C++ `std::lock_guard` inlines std::mutex::lock
/// and glibc's gthread wrapper down to the call: every site of a program
/// read `gthr-default.h:749`, not its own line. A call in no such chain
/// keeps its innermost line.
fn program_location(lines: &addr2line::Loader, address: u64) -> Option<(String, Option<u32>)> {
    let mut innermost = None;
    if let Ok(mut frames) = lines.find_frames(address) {
        while let Ok(Some(frame)) = frames.next() {
            let Some(location) = frame.location else { continue };
            let Some(file) = location.file else { continue };
            if !is_system_source(file) {
                return Some((file.to_string(), location.line));
            }
            innermost.get_or_insert((file.to_string(), location.line));
        }
    }
    innermost.or_else(|| {
        let location = lines.find_location(address).ok().flatten()?;
        Some((location.file?.to_string(), location.line))
    })
}

/// Whether `file` is a system or toolchain header (C and C++ library
/// headers, GCC's and LLVM's, Rust's standard library), not the
/// program's own source.
fn is_system_source(file: &str) -> bool {
    ["/usr/include/", "/usr/local/include/", "/usr/lib/gcc/", "/usr/lib/llvm", "/rustc/"].iter().any(|dir| file.starts_with(dir))
}

#[cfg(test)]
mod tests {
    use super::{readable_name, Symbolizer};

    /// A function of this test program, to symbolize.
    #[inline(never)]
    fn a_function_to_name() -> usize {
        a_function_to_name as fn() -> usize as usize
    }

    /// A refresh keeps what was read of an object still loaded where it
    /// was, and names alike after it.
    #[test]
    fn a_refresh_keeps_what_was_read() {
        let pc = a_function_to_name() + 1;
        let mut symbols = Symbolizer::new();
        let before = symbols.code(pc);
        assert!(before.name.contains("a_function_to_name"), "{before:?}");
        let (module, _) = symbols.module(pc as u64).unwrap();
        assert!(module.symbols.get().is_some() && module.lines.get().is_some());
        symbols.refresh();
        let (module, _) = symbols.module(pc as u64).unwrap();
        assert!(module.symbols.get().is_some() && module.lines.get().is_some(), "read again at the next write");
        let after = symbols.code(pc);
        assert_eq!((after.name, after.file, after.line), (before.name, before.file, before.line));
        let objects = symbols.modules.len();
        symbols.refresh();
        assert_eq!(symbols.modules.len(), objects, "each object once");
    }

    /// Mangled names are demangled; a plain C name, even one that spells
    /// a type in the mangling grammar, stays as it is.
    #[test]
    fn only_mangled_names_are_demangled() {
        assert_eq!(readable_name("m"), "m");
        assert_eq!(readable_name("table_lock"), "table_lock");
        assert_eq!(readable_name("_ZN3foo3barE"), "foo::bar");
        assert_eq!(readable_name("_Z3bari"), "bar(int)");
    }
}
