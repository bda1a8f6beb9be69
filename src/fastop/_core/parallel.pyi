"""fastop's thread pool: one kernel call split into pieces that the calling thread and
idle pool workers take as they come (the Cython API is ``parallel_run``). Idle workers
spin ``FASTOP_SPIN_US`` µs (default 100) after a call, then sleep."""
import numpy as np

def num_processors() -> int:
    """Processors this process may run on (its CPU affinity)."""

def set_spin_us(us: int) -> None:
    """How long (µs) an idle worker spins before it sleeps."""

def get_spin_us() -> int: ...

def _run_counting(npieces: int, nthreads: int) -> tuple[np.ndarray, int]:
    """Run pieces that count their own calls; the counts and the threads offered."""
def _leave_cpu(cpu: int) -> None: ...
