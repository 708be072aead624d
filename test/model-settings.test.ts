// The model settings table (src/serving/model-settings.ts) as users meet it: each setting is
// a key of a repository file (a wrong value refused naming it, a right one served as given),
// and, where it has a flag, the flag and its environment variable give the same entry as the
// file's key; `serve --help` and the docs name each flag, variable and key.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { MODEL_SETTINGS, envOf, flagOf, settingKeys, type Setting, type SettingKey } from '../src/serving/model-settings.js';
import { readRepositoryEntries } from '../src/serving/repository.js';
import { entriesFrom, withModelFlags } from '../src/cli/common.js';
import { tempDir } from './fixtures.js';
import { ROOT } from './cli-serve.js';

/** A value the setting takes, as a file writes it and as the command line does; and one it refuses. */
function samples(key: SettingKey): { file: unknown; cli: string; bad: unknown[] } {
  const { type }: Setting = MODEL_SETTINGS[key];
  switch (type.kind) {
    case 'text':
      return { file: key === 'weightsCache' ? 'off' : 'cpu', cli: key === 'weightsCache' ? 'off' : 'cpu', bad: ['', 3] };
    case 'whole':
      return { file: type.min + 7, cli: String(type.min + 7), bad: [type.min - 1, 2.5, '8'] };
    case 'oneOf':
      return { file: type.values.at(-1), cli: type.values.at(-1)!, bad: ['none of them', 1] };
    case 'switch':
      return { file: true, cli: 'on', bad: ['on', 1] };
  }
}

function readOne(entry: object): ReturnType<typeof readRepositoryEntries> {
  const dir = tempDir('settings');
  fs.writeFileSync(path.join(dir, 'm.json'), JSON.stringify({ path: 'ckpt', ...entry }));
  return readRepositoryEntries(dir);
}

/** `ctxprobe serve`'s model flags parsed from `argv` with `env`: the entry they give. */
function entryFrom(argv: string[], env: Record<string, string> = {}) {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  try {
    const cmd = withModelFlags(new Command().exitOverride().configureOutput({ writeErr: () => {} }));
    cmd.parse(['node', 'ctxprobe', '--model', '/models/m', ...argv]);
    return entriesFrom(cmd.opts())[0]!;
  } finally {
    process.env = saved;
  }
}

describe('model settings', () => {
  it.each(settingKeys)('%s: a repository key, refused naming it when wrong', (key) => {
    const { file, bad } = samples(key);
    const ok = readOne({ [key]: file });
    expect(ok.failed).toEqual([]);
    expect(ok.entries[0]![key]).toEqual(key === 'weightsCache' ? 'off' : file);
    for (const value of bad) {
      const { entries, failed } = readOne({ [key]: value });
      expect(entries).toEqual([]);
      expect(failed[0]!.reason).toContain(`m.json: ${key} `);
    }
  });

  const flagged = settingKeys.filter((k) => (MODEL_SETTINGS[k] as Setting).arg);
  it.each(flagged)('%s: its flag and its environment variable give the file key’s value', (key) => {
    const { file, cli } = samples(key);
    expect(entryFrom([flagOf(key), cli])[key]).toEqual(file);
    expect(entryFrom([], { [envOf(key)]: cli })[key]).toEqual(file);
    expect(entryFrom([])[key]).toBeUndefined();
    if (MODEL_SETTINGS[key].type.kind !== 'text') expect(() => entryFrom([flagOf(key), 'x'])).toThrow(new RegExp(flagOf(key)));
  });

  it('serve --help and the docs name every flag with its variable, and every key', () => {
    const help = execFileSync(process.execPath, [path.join(ROOT, 'bin/ctxprobe.js'), 'serve', '--help'], { encoding: 'utf8' });
    const operations = fs.readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8');
    const models = fs.readFileSync(path.join(ROOT, 'docs/models.md'), 'utf8');
    for (const key of flagged) {
      expect(help).toContain(flagOf(key));
      expect(help.replace(/\s+/g, ' ')).toContain(`env: ${envOf(key)}`);
      expect(operations).toMatch(new RegExp(`\\| \`${flagOf(key)}[^\`]*\` \\| \`${envOf(key)}\``));
    }
    for (const key of settingKeys) expect(models).toMatch(new RegExp(`["\`]${key}["\`]`));
  });
});
