//! Memory for the slabs' chunks, mapped from the OS directly rather than taken from the
//! global allocator.
//!
//! A chunk given back after a spike must leave the process, or the give-back is for
//! nothing. The global allocator need not return a large block it is handed back: mimalloc
//! keeps memory that one thread frees cached for the thread that allocated it (after a
//! spike of ten million timers, 641 MB of 880 MB stayed resident once the engine had freed
//! everything), and arena allocators keep large blocks too. So on Linux, with the `mmap`
//! feature (a default), each chunk is its own anonymous mapping (`mmap`), and giving it
//! back unmaps it (`munmap`): the pages go back to the OS whatever the allocator. Chunks
//! are few (their sizes double) and made or given back rarely, so a system call each costs
//! nothing measurable. The memory comes zeroed and is committed page by page as it is
//! first touched, as `alloc_zeroed` gives it for large blocks. Elsewhere, without the
//! feature, and under Miri (which cannot map memory), the global allocator serves.
//!
//! Big chunks (2 MiB or more, aligned to that by `huge_aligned`) are advised onto
//! transparent huge pages, where the system offers them (Linux's `madvise` mode, a common
//! default) and the caller asks: with millions of timers every cancel is a random access,
//! and a 2 MiB page covers what 512 small pages did, so far fewer of those accesses miss
//! the TLB (engine W1 at a million pending timers, whose cancels and schedules each touch
//! a random slot, ran faster with the shard's slots on huge pages, as the wheel's slab
//! already was). The advice is only advice; where it is refused nothing changes. A huge
//! page is a whole block of 2 MiB: a virtual machine that gives its unused memory back to
//! its host (free page reporting) hands it out from memory the host must first supply
//! again, which cost the CPU that touched it 3.5 to 4.7 ms per huge page on our test VM,
//! against small pages the VM mostly reuses; hence `Builder::huge_pages`.

use std::alloc::Layout;

/// Blocks of at least this many bytes are aligned to it and advised onto huge pages.
const HUGE_PAGE: usize = 2 << 20;

/// `layout`, aligned to a huge page if it is at least that big (see the module doc). The
/// same layout gives the same result, as `free` needs.
pub(crate) fn huge_aligned(layout: Layout) -> Layout {
    if layout.size() >= HUGE_PAGE {
        // A block that big whose size cannot be rounded up to the alignment does not
        // exist in practice; it would keep its own alignment.
        layout.align_to(HUGE_PAGE).unwrap_or(layout)
    } else {
        layout
    }
}

/// Zeroed memory for `layout`, which has a non-zero size, advised onto huge pages if
/// `huge` and big enough (see the module doc); never null (an allocation failure goes to
/// `handle_alloc_error`, as with the global allocator).
#[cfg(all(target_os = "linux", feature = "mmap", not(miri)))]
pub(crate) fn allocate_zeroed(layout: Layout, huge: bool) -> *mut u8 {
    let page = page_size();
    let align = layout.align().max(page);
    let size = layout.size().next_multiple_of(page);
    // Over-mapped by the alignment, then trimmed to an aligned range of `size` bytes.
    let Some(mapped) = size.checked_add(align - page) else {
        std::alloc::handle_alloc_error(layout);
    };
    // SAFETY: an anonymous private mapping at an address the kernel picks: no file, no
    // existing memory is involved, and the result is checked below.
    let start = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            mapped,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if start == libc::MAP_FAILED {
        std::alloc::handle_alloc_error(layout);
    }
    let head = (start as usize).next_multiple_of(align) - start as usize;
    let tail = mapped - head - size;
    // SAFETY: both ranges lie inside the mapping just made, which nothing uses yet, and
    // start and end on page boundaries (the mapping, `align` and `size` are page
    // multiples). Unmapping them cannot fail for such ranges; if it did, the pages would
    // only stay mapped and unused.
    let memory = unsafe {
        if head > 0 {
            libc::munmap(start, head);
        }
        if tail > 0 {
            libc::munmap(start.cast::<u8>().add(head + size).cast(), tail);
        }
        start.cast::<u8>().add(head)
    };
    if huge && size >= HUGE_PAGE && align >= HUGE_PAGE {
        // SAFETY: the range is exactly the mapping just made, which nothing else uses yet,
        // and it starts on a huge-page (so page) boundary. MADV_HUGEPAGE changes how the
        // kernel backs the range, never its contents. The result is ignored on purpose: a
        // kernel without THP says no, and the block is then just made of small pages.
        unsafe { libc::madvise(memory.cast(), size, libc::MADV_HUGEPAGE) };
    }
    memory
}

/// Gives memory from `allocate_zeroed` back to the OS.
///
/// # Safety
///
/// `memory` came from `allocate_zeroed(layout)` with this `layout`, is given back once,
/// and is not used afterwards.
#[cfg(all(target_os = "linux", feature = "mmap", not(miri)))]
pub(crate) unsafe fn free(memory: *mut u8, layout: Layout) {
    let size = layout.size().next_multiple_of(page_size());
    // SAFETY: by the contract, exactly the range `allocate_zeroed` left mapped, unused
    // from here on. The result is ignored: unmapping a whole mapping of our own does not
    // fail, and if it did the pages would only stay mapped.
    unsafe { libc::munmap(memory.cast(), size) };
}

/// The system's page size.
#[cfg(all(target_os = "linux", feature = "mmap", not(miri)))]
fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant; it takes no pointer.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|size| size.is_power_of_two())
        .unwrap_or(4096)
}

/// Zeroed memory for `layout`, which has a non-zero size, from the global allocator
/// (which takes no advice on huge pages).
#[cfg(not(all(target_os = "linux", feature = "mmap", not(miri))))]
pub(crate) fn allocate_zeroed(layout: Layout, _huge: bool) -> *mut u8 {
    // SAFETY: the caller's layout has a non-zero size.
    let memory = unsafe { std::alloc::alloc_zeroed(layout) };
    if memory.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    memory
}

/// Gives memory from `allocate_zeroed` back to the global allocator.
///
/// # Safety
///
/// As for the Linux version: `memory` came from `allocate_zeroed(layout)`, once.
#[cfg(not(all(target_os = "linux", feature = "mmap", not(miri))))]
pub(crate) unsafe fn free(memory: *mut u8, layout: Layout) {
    // SAFETY: allocated by the global allocator with this layout, freed once.
    unsafe { std::alloc::dealloc(memory, layout) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_comes_zeroed_aligned_and_writable() {
        for (size, align) in [(24, 8), (3_000, 64), (100_000, 8), (4 << 20, 2 << 20)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            let memory = allocate_zeroed(layout, true);
            assert_eq!(
                memory as usize % align,
                0,
                "{size} bytes aligned to {align}"
            );
            // SAFETY: `size` bytes were just allocated for this test alone.
            let bytes = unsafe { std::slice::from_raw_parts_mut(memory, size) };
            assert!(bytes.iter().step_by(997).all(|&byte| byte == 0));
            bytes[size - 1] = 7;
            bytes[0] = 7;
            // SAFETY: allocated above with this layout, freed once, not used after.
            unsafe { free(memory, layout) };
        }
    }
}
