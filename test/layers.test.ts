// The seams as rules over imports: transports share the serving layer and never import
// each other; checkpoint/ imports nothing above it; clients and kernels stay out of the
// server's insides. Read from the source, so a new import that crosses a seam fails here.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function sources(dir: string): string[] {
  return fs
    .readdirSync(path.join(root, dir), { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

/** Project files a source file imports values from (type-only imports of request and
 * answer shapes are not a dependency on the code), relative to the root. */
function imports(file: string): string[] {
  return allImports(file)
    .filter((i) => !i.typeOnly)
    .map((i) => i.path);
}

/** Every project file a source file names in an import or re-export, type-only ones
 * included (a type is a dependency on the layer that defines it). */
function allImports(file: string): { path: string; typeOnly: boolean }[] {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  return [...text.matchAll(/^(?:import|export) (type )?[^;]*?from '(\.{1,2}\/[^']+)'|import\('(\.{1,2}\/[^']+)'\)/gms)].map((m) => ({
    typeOnly: m[1] !== undefined,
    path: path.relative(root, path.resolve(path.dirname(path.join(root, file)), (m[2] ?? m[3])!)).replace(/\.js$/, '.ts'),
  }));
}

/** The layers of docs/architecture.md, top to bottom (its Layers section): a file imports from its own
 * layer or those below, never from one above — type imports, re-exports and dynamic
 * imports included. */
const LAYERS: [string, RegExp][] = [
  ["entry points: the CLI, the runners, the server's wiring", /^src\/(cli\/|eval\/|server\.ts$)/],
  ['transports', /^src\/(grpc|http)\//],
  ['the API', /^src\/api\//],
  ['the serving layer', /^src\/serving\//],
  ['request kinds', /^src\/requests\//],
  ['the core', /^src\/core\//],
  ['the engine', /^src\/engine\//],
  ['what a model is built from', /^(src\/(model|graph|checkpoint|text|workers|weights)\/|kernels\/)/],
  ['leaves', /^src\/(figures|common)\//],
];
const layerOf = (file: string) => LAYERS.findIndex(([, re]) => re.test(file));
/** Crossings upward that are by design, with why. */
const ALLOWED_UP = new Map([
  // The viewer page reads a runner's JSONL line as the runners do: records.ts imports no
  // code (a rule below) and runs in the browser.
  ['src/http/ui/app.ts → src/eval/records.ts', 'the page reads records as the runners do'],
]);

const rules: [string, RegExp, RegExp][] = [
  ['HTTP does not import gRPC', /^src\/http\//, /^src\/grpc\//],
  ['gRPC does not import HTTP', /^src\/grpc\//, /^src\/http\//],
  [
    'transports talk to the serving layer, not to engines, scorers or probers',
    /^src\/(grpc|http)\//,
    /^src\/(engine\/|model\/|core\/|requests\/probe\.ts)/,
  ],
  ['the API (method bodies) belongs to neither transport', /^src\/api\//, /^src\/(grpc|http)\//],
  [
    'the API talks to the serving layer, not to engines, scorers or probers',
    /^src\/api\//,
    /^src\/(engine\/|model\/|core\/|requests\/probe\.ts)/,
  ],
  // The page runs in a browser: it may import its own modules and the Node-free records.ts only.
  [
    'the viewer page imports only browser-safe modules',
    /^src\/http\/ui\//,
    /^(?!src\/http\/ui\/|src\/eval\/records\.ts$|src\/figures\/charts\.ts$|src\/common\/floats\.ts$)/,
  ],
  [
    'records.ts, charts.ts and floats.ts (imported by the page) import no code',
    /^src\/(eval\/records|figures\/charts|common\/floats)\.ts$/,
    /./,
  ],
  ['checkpoint/ imports nothing above it', /^src\/checkpoint\//, /^src\/(model|core|requests|serving|grpc|http|engine)/],
  // A runner without --address starts a whole server in its process (server.ts and the
  // model repository): that is the API too.
  ['eval clients use the API, not server internals', /^src\/eval\//, /^src\/(requests|core|serving\/(?!repository\.ts)|engine|model)/],
  ['the planner is pure', /^src\/core\/planner\.ts$/, /^src\/(engine|core\/(batcher|runner|scorer)|serving)/],
  ['the engine knows no requests, units or scheduling', /^src\/engine\//, /^src\/(core|requests|serving|grpc|http)/],
];

describe('layers', () => {
  const files = [...sources('src'), ...sources('kernels')];
  it.each(rules)('%s', (_, from, to) => {
    const crossings = files
      .filter((f) => from.test(f))
      .flatMap((f) =>
        imports(f)
          .filter((i) => to.test(i))
          .map((i) => `${f} → ${i}`),
      );
    expect(crossings).toEqual([]);
  });

  it('every file belongs to a layer, and no import runs up the layer order', () => {
    expect(files.filter((f) => layerOf(f) < 0)).toEqual([]);
    const up = files.flatMap((f) =>
      allImports(f)
        .filter((i) => layerOf(i.path) >= 0 && layerOf(i.path) < layerOf(f))
        .map((i) => `${f} → ${i.path}${i.typeOnly ? ' (type)' : ''}`)
        .filter((c) => !ALLOWED_UP.has(c)),
    );
    expect(up).toEqual([]);
  });

  it.each(['src/model/decoder.ts', 'src/model/self-attention.ts'])('%s has no probe-specific code beyond the tap hooks', (file) => {
    const code = fs.readFileSync(path.join(root, file), 'utf8').replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '');
    expect(code).not.toMatch(/\bprobe|key_bin|heatmap|votes/i);
  });

  it('the generated gRPC types match proto/ (npm run proto:types)', () => {
    expect(() => execFileSync('node', [path.join(root, 'scripts/proto-types.mjs'), '--check'], { stdio: 'pipe' })).not.toThrow();
  });
});

// The code's size and shape as rules: files a reader can hold, functions a reader can hold,
// one place that knows the providers, no cycles, each type declared once.
describe('seams', () => {
  const files = [...sources('src'), ...sources('kernels')].filter((f) => !f.startsWith('src/api/generated/'));
  const parsed = files.map((f) => ({
    file: f,
    ast: ts.createSourceFile(f, fs.readFileSync(path.join(root, f), 'utf8'), ts.ScriptTarget.ES2022, true),
  }));
  const walk = (node: ts.Node, visit: (n: ts.Node) => void) => {
    visit(node);
    node.forEachChild((child) => walk(child, visit));
  };
  const lineOf = (ast: ts.SourceFile, pos: number) => ast.getLineAndCharacterOfPosition(pos).line + 1;

  it('no hand-written source file is over 500 lines', () => {
    const long = parsed
      .map(({ file, ast }) => `${file}: ${ast.getLineAndCharacterOfPosition(ast.end).line} lines`)
      .filter((l) => Number(/(\d+) lines/.exec(l)![1]) > 500);
    expect(long).toEqual([]);
  });

  it('no function body is over 100 lines', () => {
    const long: string[] = [];
    for (const { file, ast } of parsed) {
      walk(ast, (n) => {
        if (!ts.isFunctionLike(n) || !('body' in n) || !n.body) return;
        const body = n.body as ts.Node;
        const lines = lineOf(ast, body.end) - lineOf(ast, body.getStart(ast)) - 1;
        if (lines > 100) long.push(`${file}:${lineOf(ast, n.getStart(ast))} ${lines} lines`);
      });
    }
    expect(long).toEqual([]);
  });

  it('no provider is named in a comparison outside common/providers.ts: code reads capabilities', () => {
    const PROVIDER_NAMES = new Set(['cpu', 'cuda', 'webgpu']);
    const compared: string[] = [];
    for (const { file, ast } of parsed.filter((p) => p.file !== 'src/common/providers.ts')) {
      walk(ast, (n) => {
        if (!ts.isStringLiteral(n) || !PROVIDER_NAMES.has(n.text)) return;
        const parent = n.parent;
        const equality =
          ts.isBinaryExpression(parent) &&
          [
            ts.SyntaxKind.EqualsEqualsEqualsToken,
            ts.SyntaxKind.ExclamationEqualsEqualsToken,
            ts.SyntaxKind.EqualsEqualsToken,
            ts.SyntaxKind.ExclamationEqualsToken,
          ].includes(parent.operatorToken.kind);
        if (equality || ts.isCaseClause(parent)) compared.push(`${file}:${lineOf(ast, n.getStart(ast))} ${parent.getText(ast)}`);
      });
    }
    // A tensor's location ('cpu' or 'gpu-buffer') is not a provider.
    expect(compared.filter((c) => !/\.location ===/.test(c))).toEqual([]);
  });

  it('no import cycle among source files, type-only imports included', () => {
    const graph = new Map(
      files.map((f) => [
        f,
        allImports(f)
          .map((i) => i.path)
          .filter((i) => files.includes(i)),
      ]),
    );
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const visit = (f: string, trail: string[]) => {
      if (state.get(f) === 'done') return;
      if (state.get(f) === 'open') {
        cycles.push([...trail.slice(trail.indexOf(f)), f].join(' → '));
        return;
      }
      state.set(f, 'open');
      for (const next of graph.get(f)!) visit(next, [...trail, f]);
      state.set(f, 'done');
    };
    for (const f of files) visit(f, []);
    expect(cycles).toEqual([]);
  });

  it('no file but src/common/errors.ts declares an error class (of Error, a built-in error or one of ours)', () => {
    // One error model: what is thrown is one of errors.ts's kinds, which each transport maps.
    const errorClasses = new Set([
      'Error',
      'AggregateError',
      'EvalError',
      'RangeError',
      'ReferenceError',
      'SyntaxError',
      'TypeError',
      'URIError',
    ]);
    const classes = parsed.flatMap(({ file, ast }) => {
      const found: { file: string; line: number; name: string; base: string }[] = [];
      walk(ast, (n) => {
        if (!ts.isClassLike(n)) return;
        const base = n.heritageClauses?.find((h) => h.token === ts.SyntaxKind.ExtendsKeyword)?.types[0]?.expression;
        // `errors.CtxprobeError` is CtxprobeError; an anonymous class is named by its line.
        if (base)
          found.push({ file, line: lineOf(ast, n.getStart(ast)), name: n.name?.text ?? '', base: base.getText(ast).split('.').at(-1)! });
      });
      return found;
    });
    // Subclasses of subclasses, to a fixed point.
    for (let known = 0; known !== errorClasses.size;) {
      known = errorClasses.size;
      for (const c of classes) if (c.name && errorClasses.has(c.base)) errorClasses.add(c.name);
    }
    const declared = classes.filter((c) => errorClasses.has(c.base) && c.file !== 'src/common/errors.ts');
    expect(declared.map((c) => `${c.file}:${c.line} class ${c.name || '(anonymous)'} extends ${c.base}`)).toEqual([]);
  });

  it('each interface and type alias name is declared in one file', () => {
    const where = new Map<string, Set<string>>();
    for (const { file, ast } of parsed) {
      walk(ast, (n) => {
        if ((ts.isInterfaceDeclaration(n) || ts.isTypeAliasDeclaration(n)) && n.parent === ast)
          where.set(n.name.text, (where.get(n.name.text) ?? new Set()).add(file));
      });
    }
    expect([...where].filter(([, fs]) => fs.size > 1).map(([name, fs]) => `${name}: ${[...fs].join(', ')}`)).toEqual([]);
  });
});
