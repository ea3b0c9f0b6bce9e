/* module.c -- shardwise._cuda: the CUDA backend as a Python extension module.
 *
 *   _backend               capsule (SW_EXT_BACKEND_CAPSULE): the constructor the core calls
 *   versions()             {"cuda_build", "driver", "cudnn", "cudnn_build", "cublas",
 *                          "cublas_build", "nccl_build"}: what this module was built with (the
 *                          headers' versions; nccl_build is NCCL_VERSION_CODE, 0 where the build
 *                          found no nccl.h) and what it loaded (no GPU needed)
 *   gpus()                 [(name, (major, minor), memory bytes, multiprocessors, core MHz,
 *                           memory bytes/s)],
 *                          or RuntimeError naming what is missing (no driver, no GPU)
 *   has_kernels(op_type)   whether the backend has kernels for an op kind (_core.OP_KINDS)
 *   nccl_version(), HAVE_NCCL, NcclComm, DeviceBuffer   NCCL (nccl_module.c, comm_nccl.c): where
 *                          the build found nccl.h and libnccl.so.2 (SW_HAVE_NCCL), linked to it
 *
 * Importing it loads cuDNN and cuBLAS (from the nvidia wheels, by the rpath the build set);
 * the driver is loaded at the first CUDA call.  The core imports this module only when a
 * runtime asks for the CUDA backend, so `import shardwise` never needs them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "comm_nccl.h"
#include "cuda_backend.h"

#ifndef SW_NCCL_BUILD_VERSION   /* set by tools/build_cuda.py from the nccl.h it found */
#define SW_NCCL_BUILD_VERSION 0
#endif

/* nccl_module.c */
PyObject *cu_nccl_version(PyObject *self, PyObject *unused);
int cu_nccl_add_types(PyObject *m);

static const sw_ext_backend TABLE = {
    .version = SW_EXT_ABI_VERSION,
    .sizes = SW_EXT_SIZES(sw_ext_backend),
    .name = "cuda",
    .backend_new = cu_backend_new,
    .iface = cu_backend_iface,
};

static PyObject *versions(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    int driver = 0, major = 0, minor = 0, patch = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) {   /* 0 when no driver is installed */
        (void)cudaGetLastError();
        driver = 0;
    }
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    return Py_BuildValue("{s:i,s:i,s:n,s:i,s:(iii),s:(iii),s:i}", "cuda_build", CUDART_VERSION, "driver", driver,
                         "cudnn", (Py_ssize_t)cudnnGetVersion(), "cudnn_build", CUDNN_VERSION, "cublas", major, minor,
                         patch, "cublas_build", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, "nccl_build",
                         SW_NCCL_BUILD_VERSION);
}

static PyObject *gpus(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    int n = 0, driver = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) {
            return PyErr_Format(PyExc_RuntimeError, "no NVIDIA driver: libcuda.so.1 was not found");
        }
        if (e == cudaErrorInsufficientDriver) {
            return PyErr_Format(PyExc_RuntimeError, "the NVIDIA driver (CUDA %d.%d) is older than this build's CUDA "
                                "%d.%d runtime", driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                                CUDART_VERSION % 1000 / 10);
        }
        if (e == cudaErrorNoDevice) {
            return PyErr_Format(PyExc_RuntimeError, "the NVIDIA driver sees no GPU");
        }
        return PyErr_Format(PyExc_RuntimeError, "CUDA: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    PyObject *l = PyList_New(0);
    for (int g = 0; l && g < n; g++) {
        struct cudaDeviceProp p;
        int khz = 0, mem_khz = 0, bus_bits = 0;
        if (cudaGetDeviceProperties(&p, g) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, g) != cudaSuccess ||
            cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, g) != cudaSuccess ||
            cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, g) != cudaSuccess) {
            (void)cudaGetLastError();
        }
        /* double data rate: two transfers per memory clock, bus_bits / 8 bytes each */
        double bandwidth = 2.0 * (double)mem_khz * 1e3 * (double)bus_bits / 8.0;
        PyObject *x = Py_BuildValue("(s(ii)niid)", p.name, p.major, p.minor, (Py_ssize_t)p.totalGlobalMem,
                                    p.multiProcessorCount, khz / 1000, bandwidth);
        if (!x || PyList_Append(l, x) < 0) {
            Py_XDECREF(x);
            Py_CLEAR(l);
            break;
        }
        Py_DECREF(x);
    }
    return l;
}

static PyObject *has_kernels(PyObject *self, PyObject *arg) {
    (void)self;
    long k = PyLong_AsLong(arg);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(cu_has_kernels((int)k));
}

static PyMethodDef methods[] = {
    {"versions", versions, METH_NOARGS, "versions() -> what the CUDA backend was built with and loaded"},
    {"gpus", gpus, METH_NOARGS,
     "gpus() -> [(name, (major, minor), memory, SMs, MHz, memory bytes/s)]; RuntimeError without GPUs"},
    {"has_kernels", has_kernels, METH_O, "has_kernels(op_type) -> whether the CUDA backend runs that op kind"},
    {"nccl_version", cu_nccl_version, METH_NOARGS,
     "nccl_version() -> ncclGetVersion of the libnccl linked (major*10000 + minor*100 + patch); None without NCCL"},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *m) {
    PyObject *cap = PyCapsule_New((void *)&TABLE, SW_EXT_BACKEND_CAPSULE, NULL);
    if (!cap || PyModule_AddObjectRef(m, "_backend", cap) < 0) {
        Py_XDECREF(cap);
        return -1;
    }
    Py_DECREF(cap);
    return cu_nccl_add_types(m);
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shardwise._cuda",
    .m_doc = "The CUDA backend of shardwise (cuDNN, cuBLAS, own kernels); loaded only when asked for.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__cuda(void) { return PyModuleDef_Init(&module_def); }
