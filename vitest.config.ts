import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // One temporary folder for the run, removed after it (test/global-setup.ts).
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // onnxruntime sessions are native: separate processes keep a crash from hiding others.
    pool: 'forks',
  },
});
