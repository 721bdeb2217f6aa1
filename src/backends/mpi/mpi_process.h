// MPI's once-per-process life: MPI_Init may run once and MPI_Finalize once, after which MPI
// cannot start again. ronde's communicators come and go (shutdown then init, as Horovod's tests
// do), so the process initialises MPI at the first MPI communicator (unless the program, e.g.
// mpi4py, did), keeps it for every later one, and finalises at exit.
#pragma once

namespace ronde::mpi {

// Initialises MPI with at least MPI_THREAD_SERIALIZED (the runtime calls MPI from its
// background thread and the async queue's, never two at once). Error(kConfig) when MPI was
// finalised already or another initialiser chose a lower thread level.
void ensureInitialized();

// A communicator left a collective pending (a timeout or an abort: MPI cannot cancel one), so
// MPI_Finalize at exit would wait for it forever; the exit then skips it and mpirun reports
// the failed rank, which is all an MPI job can do about a lost peer.
void markUnfinishable();

}  // namespace ronde::mpi
