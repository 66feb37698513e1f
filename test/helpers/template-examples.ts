/**
 * Adds the sample values the upstream requires at template creation (reference §5) where a test's
 * components leave them out: `example.body_text` / `header_text` for variables, a
 * `header_handle` for media headers and a sample URL for a URL button with a variable. Components
 * that already carry an example are left as they are.
 */
type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const variableCount = (text: unknown) => (typeof text === 'string' ? new Set(text.match(/\{\{\d+\}\}/g) ?? []).size : 0);

export function withExamples(components: unknown[]): unknown[] {
  return components.map((component) => {
    if (!isObject(component) || component.example !== undefined) return component;
    const type = String(component.type).toUpperCase();
    if (type === 'BODY' && variableCount(component.text) > 0) {
      return { ...component, example: { body_text: [Array.from({ length: variableCount(component.text) }, (_, i) => `sample${i + 1}`)] } };
    }
    if (type === 'HEADER' && String(component.format).toUpperCase() === 'TEXT' && variableCount(component.text) > 0) {
      return { ...component, example: { header_text: ['sample'] } };
    }
    if (type === 'HEADER' && ['IMAGE', 'VIDEO', 'DOCUMENT'].includes(String(component.format).toUpperCase())) {
      return { ...component, example: { header_handle: ['4::c2FtcGxl:sample-handle'] } };
    }
    if (type === 'BUTTONS' && Array.isArray(component.buttons)) {
      return { ...component, buttons: component.buttons.map((b) => (isObject(b) && String(b.type).toUpperCase() === 'URL' && b.example === undefined && variableCount(b.url) > 0
        ? { ...b, example: [String(b.url).replace('{{1}}', 'sample')] } : b)) };
    }
    return component;
  });
}
