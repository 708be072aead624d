// The GPU as the host names it, for ListModels and the load log. onnxruntime-node 1.30 does
// not say which adapter its WebGPU provider picked (Node has no navigator.gpu, and the
// binding exposes no device info), so this reads what the host's drivers declare: NVIDIA's
// kernel driver names each GPU under /proc/driver/nvidia; the Vulkan loader's driver
// manifests (VK_DRIVER_FILES, else the standard folders) say which Vulkan drivers Dawn can
// choose from, Mesa's lavapipe being a software GPU on the CPU.
import fs from 'node:fs';
import path from 'node:path';
import type { ProviderProfile } from '../common/providers.js';

/** The device by the way its provider reaches it (common/providers.ts): none (the CPU), an
 * NVIDIA GPU by its kernel driver, or the Vulkan drivers WebGPU can choose from. */
export function describeAdapter(adapter: ProviderProfile['adapter']): string {
  if (adapter === 'none') return '';
  const gpus = nvidiaGpus();
  if (adapter === 'nvidia') return gpus.join(', ') || 'CUDA device (name not readable from /proc/driver/nvidia)';
  const named = answeringDrivers(gpus).map((d) =>
    /lvp/.test(d)
      ? 'Mesa lavapipe (software Vulkan on the CPU)'
      : /nvidia/.test(d)
        ? `NVIDIA Vulkan${gpus.length ? ` (${gpus.join(', ')})` : ''}`
        : d,
  );
  return named.length > 0 ? `Vulkan drivers: ${[...new Set(named)].join('; ')}` : 'no Vulkan driver manifest found';
}

/** Whether every Vulkan driver that can answer WebGPU here is Mesa's lavapipe: the device's
 * memory is then this host's, and the memory plan holds on WebGPU as on the CPU. */
export function onlySoftwareVulkan(): boolean {
  const drivers = answeringDrivers(nvidiaGpus());
  return drivers.length > 0 && drivers.every((d) => /lvp/.test(d));
}

/** The Vulkan drivers that can answer: a hardware driver needs its device node; without
 * one only software drivers can. */
function answeringDrivers(gpus: string[]): string[] {
  const hardware = fs.existsSync('/dev/dri') && fs.readdirSync('/dev/dri').some((f) => f.startsWith('renderD'));
  const nvidia = gpus.length > 0 || fs.existsSync('/dev/nvidiactl');
  return vulkanDrivers().filter((d) => /lvp/.test(d) || (/nvidia/.test(d) ? nvidia : hardware));
}

function nvidiaGpus(): string[] {
  const root = '/proc/driver/nvidia/gpus';
  try {
    return fs.readdirSync(root).flatMap((bus) => {
      const m = /^Model:\s*(.+)$/m.exec(fs.readFileSync(path.join(root, bus, 'information'), 'utf8'));
      return m ? [m[1]!.trim()] : [];
    });
  } catch {
    return [];
  }
}

function vulkanDrivers(): string[] {
  const listed = (process.env.VK_DRIVER_FILES ?? process.env.VK_ICD_FILENAMES ?? '').split(':').filter(Boolean);
  if (listed.length > 0) return listed.map((f) => path.basename(f, '.json'));
  const dirs = ['/etc/vulkan/icd.d', '/usr/share/vulkan/icd.d', '/usr/local/share/vulkan/icd.d'];
  return dirs.flatMap((d) => {
    try {
      return fs
        .readdirSync(d)
        .filter((f) => f.endsWith('.json'))
        .map((f) => path.basename(f, '.json'));
    } catch {
      return [];
    }
  });
}
