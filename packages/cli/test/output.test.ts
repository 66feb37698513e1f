import { describe, expect, it } from 'vitest';
import { clip, fitColumns, renderRecord, renderTable, UUID_WIDTH } from '../src/output.ts';

const widest = (text: string) => Math.max(...text.split('\n').map((line) => [...line].length));
const ID = '0f8d2c1e-8a4b-4c1e-9a57-2b7c1d9e3f40';

describe('tables fitted to a width', () => {
  const rows = [
    { id: ID, name: 'Spring sale for the loyal customers of the north-west region', status: 'RUNNING', template: 'spring_sale_2025 (en_GB)', created: '2025-05-01 09:30' },
    { id: ID.replace('0f', 'a1'), name: 'Short', status: 'DRAFT', template: 'welcome (en)', created: '2025-05-02 10:00' },
  ];
  const columns = [
    { header: 'id', value: (r: typeof rows[0]) => r.id, minWidth: UUID_WIDTH },
    { header: 'name', value: (r: typeof rows[0]) => r.name },
    { header: 'status', value: (r: typeof rows[0]) => r.status },
    { header: 'template', value: (r: typeof rows[0]) => r.template },
    { header: 'created', value: (r: typeof rows[0]) => r.created },
  ];

  it('leaves a table that fits as it is', () => {
    const table = renderTable(rows, columns, 400);
    expect(table).toContain(rows[0].name);
    expect(table).not.toContain('…');
  });

  it.each([40, 60, 80, 100, 120])('is never wider than %i columns, ids kept whole while they fit', (width) => {
    const table = renderTable(rows, columns, width);
    expect(widest(table)).toBeLessThanOrEqual(width);
    if (width >= UUID_WIDTH + 4) expect(table).toContain(ID);
    expect(table).toContain('…');
  });

  it('cuts the widest column first, then leaves columns out from the right and names them', () => {
    const at120 = renderTable(rows, columns, 120);
    expect(at120).toMatch(/Spring sale for.*…/);
    expect(at120).toContain('spring_sale_2025');
    expect(at120).toContain('2025-05-01 09:30');
    expect(at120).not.toContain('not shown');

    const at80 = renderTable(rows, columns, 80);
    expect(at80.split('\n')[1]).toMatch(/^│ id +│ name +│ status +│ template +│$/);
    expect(at80.split('\n').at(-1)).toBe('… not shown: created (a wider --width, or --json)');
  });

  it('fitColumns: floors, then dropping, then the first column alone cut to what is left', () => {
    expect(fitColumns([10, 10], [5, 5], 100)).toEqual({ widths: [10, 10], dropped: 0 });
    // 7 of borders: 20 + 7 = 27 -> 25 by cutting the widest.
    expect(fitColumns([12, 8], [5, 5], 25)).toEqual({ widths: [10, 8], dropped: 0 });
    expect(fitColumns([36, 30, 30], [36, 10, 10], 60)).toEqual({ widths: [36, 17], dropped: 1 });
    expect(fitColumns([36, 30], [36, 10], 30)).toEqual({ widths: [26], dropped: 1 });
  });

  it('a record keeps its keys and cuts its values; wide characters count double', () => {
    const record = renderRecord({ id: ID, note: 'x'.repeat(200), city: '東京都渋谷区神南一丁目'.repeat(3) }, 50);
    expect(widest(record.replace(/[\u3000-\u9fff]/g, 'xx'))).toBeLessThanOrEqual(50);
    expect(record).toContain('│ note');
    expect(clip('東京都渋谷区', 7)).toBe('東京都…');
    expect(clip('abc', 3)).toBe('abc');
  });
});

describe('columns with nothing in them', () => {
  it('go first when the table is too wide, and stay when it fits', () => {
    const rows = [{ id: ID, scheduled: null, name: 'A rather long campaign name' }];
    const columns = [
      { header: 'id', value: (r: typeof rows[0]) => r.id, minWidth: UUID_WIDTH },
      { header: 'scheduled', value: (r: typeof rows[0]) => r.scheduled },
      { header: 'name', value: (r: typeof rows[0]) => r.name },
    ];
    expect(renderTable(rows, columns, 120)).toContain('scheduled');
    const narrow = renderTable(rows, columns, 60);
    expect(narrow).not.toContain('scheduled');
    expect(narrow).toContain('A rather long');
    expect(widest(narrow)).toBeLessThanOrEqual(60);
  });
});
