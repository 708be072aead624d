// Debian's Chromium for the figure and viewer tests, driven by playwright-core, started as
// this machine allows: no sandbox (root), no GPU, and none of the background connections
// a closed network refuses at every start.
import fs from 'node:fs';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const haveChromium = fs.existsSync(CHROMIUM);

export async function launchChromium(): Promise<any> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}
