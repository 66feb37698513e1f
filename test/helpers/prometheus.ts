export interface Sample { name: string; labels: Record<string, string>; value: number }

/** The Prometheus text format, one sample per line (comments skipped). */
export function parsePrometheus(text: string): Sample[] {
  return text.split('\n').filter((line) => line && !line.startsWith('#')).map((line) => {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a sample line: ${line}`);
    const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    return { name: match[1], labels, value: Number(match[3]) };
  });
}

/** The first sample of `name` carrying `labels` (others may carry more). */
export function valueOf(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

/** The sum of every sample of `name` carrying `labels`. */
export function sumOf(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0);
}

/** GET a `/metrics` listener: its samples and its text. */
export async function scrapeMetrics(url: string): Promise<{ text: string; samples: Sample[] }> {
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}`);
  if (!/^text\/plain; version=0\.0\.4/.test(res.headers.get('content-type') ?? '')) throw new Error(`GET ${url}: content-type ${res.headers.get('content-type')}`);
  const text = await res.text();
  return { text, samples: parsePrometheus(text) };
}
