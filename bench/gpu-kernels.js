// A GPU host runs this with plain node (no tsx there): the compiled bench, built by `npm run build`.
import '../dist/bench/gpu-kernels.js';
