import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

/** A line chart of one series over time (x in seconds since the epoch), sized to its container. */
export function LineChart({ xs, ys, label }: { xs: number[]; ys: number[]; label: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (!box.current) return;
    const width = Math.max(280, box.current.clientWidth - 8);
    plot.current = new uPlot({
      width, height: 200,
      series: [{}, { label, stroke: '#0b6e4f', width: 2, fill: 'rgba(11,110,79,0.12)' }],
      axes: [{ stroke: '#333' }, { stroke: '#333' }],
      scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    }, [xs, ys], box.current);
    const resize = () => plot.current?.setSize({ width: Math.max(280, (box.current?.clientWidth ?? 300) - 8), height: 200 });
    addEventListener('resize', resize);
    return () => { removeEventListener('resize', resize); plot.current?.destroy(); plot.current = null; };
  }, []);
  useEffect(() => { plot.current?.setData([xs, ys]); }, [xs, ys]);
  return (
    <>
      <div ref={box} class="chart" role="img" aria-label={`${label}: ${ys.length ? ys[ys.length - 1].toFixed(1) : 0} now, ${ys.length} samples`} />
      {ys.length === 0 && <p class="small muted">The chart fills while this page watches the campaign send.</p>}
    </>
  );
}

/** Horizontal bars, one per step of a funnel. */
export function BarChart({ bars, label }: { bars: [string, number][]; label: string }) {
  const max = Math.max(1, ...bars.map(([, v]) => v));
  return (
    <figure class="bars" aria-label={label}>
      {bars.map(([name, v]) => (
        <div class="bar-row"><span class="bar-name">{name}</span><span class="bar"><span style={{ width: `${(v / max) * 100}%` }} /></span><span class="bar-value">{v}</span></div>
      ))}
    </figure>
  );
}
