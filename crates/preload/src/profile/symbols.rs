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

unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info, and `data` is the
    // Vec<Module> handed to it below.
    let (info, modules) = unsafe { (&*info, &mut *data.cast::<Vec<Module>>()) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let path = if name.is_empty() && modules.is_empty() {
        std::fs::read_link(super::this_process("exe")).map(|p| p.display().to_string()).unwrap_or_default()
    } else {
        name
    };
    let mut segments = Vec::new();
    for i in 0..usize::from(info.dlpi_phnum) {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let header = unsafe { &*info.dlpi_phdr.add(i) };
        if header.p_type == libc::PT_LOAD {
            segments.push((header.p_vaddr, header.p_vaddr + header.p_memsz));
        }
    }
    if !path.is_empty() {
        modules.push(Module { path, bias: info.dlpi_addr, segments, symbols: OnceCell::new(), lines: OnceCell::new() });
    }
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
                name: readable_name(name),
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

    fn symbol(&self, svma: u64, code: bool) -> Option<(&str, u64)> {
        let symbols = self.symbols.get_or_init(|| load_symbols(&self.path));
        let index = symbols.partition_point(|s| s.address <= svma).checked_sub(1)?;
        let symbol = &symbols[index];
        let inside = svma < symbol.address + symbol.size.max(1) || (code && symbol.code && symbol.size == 0);
        (inside && symbol.code == code).then(|| (symbol.name.as_str(), svma - symbol.address))
    }
}

impl Symbolizer {
    /// The objects loaded now.
    pub fn new() -> Symbolizer {
        let mut modules: Vec<Module> = Vec::new();
        // SAFETY: `collect` matches the callback type and only touches the
        // Vec passed as data, which outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(collect), (&mut modules as *mut Vec<Module>).cast()) };
        Symbolizer { modules }
    }

    fn module(&self, address: u64) -> Option<(&Module, u64)> {
        self.modules.iter().find_map(|m| {
            let svma = address.wrapping_sub(m.bias);
            m.contains(svma).then_some((m, svma))
        })
    }

    /// The variable a lock at `address` is, if it is a global or static.
    pub fn data(&self, address: usize) -> Option<String> {
        let (module, svma) = self.module(address as u64)?;
        let (name, offset) = module.symbol(svma, false)?;
        Some(if offset == 0 { name.to_string() } else { format!("{name}+{offset:#x}") })
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
        let location = lines.as_ref().and_then(|l| l.find_location(svma.saturating_sub(1)).ok().flatten());
        CodeSite {
            name,
            object,
            file: location.as_ref().and_then(|l| l.file.map(str::to_string)),
            line: location.and_then(|l| l.line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::readable_name;

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
