import type { S } from '../api.ts';

type Component = Record<string, unknown>;
const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** Placeholders ({{1}}, {{2}}…) of a text, in order of first use. */
export function variables(text: string): string[] {
  return [...new Set((text.match(/\{\{\s*([\w]+)\s*\}\}/g) ?? []).map((m) => m.replace(/[{}\s]/g, '')))];
}

/** The components that take parameters, as a variable mapping lists them. */
export function mappable(template: S['Template']): { type: 'header' | 'body'; names: string[] }[] {
  const out: { type: 'header' | 'body'; names: string[] }[] = [];
  for (const c of (template.components ?? []) as Component[]) {
    const type = str(c.type).toUpperCase();
    if (type === 'HEADER' && str(c.format || 'TEXT').toUpperCase() === 'TEXT' && variables(str(c.text)).length) out.push({ type: 'header', names: variables(str(c.text)) });
    if (type === 'BODY' && variables(str(c.text)).length) out.push({ type: 'body', names: variables(str(c.text)) });
  }
  return out;
}

/** A template's components as WhatsApp shows them: a bubble with header, body, footer and buttons. */
export function TemplateBubble({ components }: { components: S['Template']['components'] }) {
  const list = (components ?? []) as Component[];
  const part = (t: string) => list.find((c) => str(c.type).toUpperCase() === t);
  const header = part('HEADER'); const body = part('BODY'); const footer = part('FOOTER'); const buttons = part('BUTTONS');
  return (
    <div class="bubble">
      {header && (str(header.format || 'TEXT').toUpperCase() === 'TEXT' ? <strong>{str(header.text)}</strong> : <div class="media">[{str(header.format)}]</div>)}
      {body && <p>{str(body.text)}</p>}
      {footer && <small class="muted">{str(footer.text)}</small>}
      {Array.isArray(buttons?.buttons) && <div class="buttons">{(buttons!.buttons as Component[]).map((b) => <span class="wa-button">{str(b.text)}</span>)}</div>}
    </div>
  );
}
