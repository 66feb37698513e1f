import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addCommunication } from '../src/modules/contacts/communications.repository.ts';
import { call, createTenant, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';

describe('contact sub-resources: notes, follow-ups, communications', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });

  const newContact = async (tenant: TestTenant) => (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Note', phone: uniquePhone() })).json();
  const eventsOf = (tenantId: string, type: string) =>
    t.deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenantId).where('type', '=', type).orderBy('created_at').execute();

  it('adds and lists notes, emitting contact.note_added with the note', async () => {
    const tenant = await createTenant(t.app);
    const contact = await newContact(tenant);
    const res = await call(t.app, tenant, 'POST', `/contacts/${contact.id}/notes`, { content: 'Called about the renewal' });
    expect(res.statusCode).toBe(201);
    const note = res.json();
    expect(Object.keys(note).sort()).toEqual(['contact_id', 'content', 'created_at', 'id']);
    expect(note).toMatchObject({ contact_id: contact.id, content: 'Called about the renewal' });
    await call(t.app, tenant, 'POST', `/contacts/${contact.id}/notes`, { content: 'Second' });

    const list = await call(t.app, tenant, 'GET', `/contacts/${contact.id}/notes?limit=1`);
    expect(list.statusCode).toBe(200);
    expect(list.json().data).toHaveLength(1);
    expect(list.json().pagination).toMatchObject({ total_items: 2, total_pages: 2, has_next: true });
    const [event] = await eventsOf(tenant.id, 'contact.note_added');
    expect(event.data).toEqual(note);
  });

  it('rejects bad notes and unknown contacts without writing', async () => {
    const tenant = await createTenant(t.app);
    const contact = await newContact(tenant);
    for (const body of [{}, { content: '' }, { content: 'x'.repeat(5001) }]) {
      const res = await call(t.app, tenant, 'POST', `/contacts/${contact.id}/notes`, body);
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    expect((await call(t.app, tenant, 'POST', '/contacts/00000000-0000-4000-8000-000000000000/notes', { content: 'x' })).statusCode).toBe(404);
    expect((await call(t.app, tenant, 'GET', '/contacts/not-a-uuid/notes')).statusCode).toBe(404);
    await call(t.app, tenant, 'DELETE', `/contacts/${contact.id}`);
    expect((await call(t.app, tenant, 'POST', `/contacts/${contact.id}/notes`, { content: 'archived' })).statusCode).toBe(404);
    expect(await eventsOf(tenant.id, 'contact.note_added')).toHaveLength(0);
  });

  it('creates, lists, updates and deletes follow-ups with followup.* events', async () => {
    const tenant = await createTenant(t.app);
    const contact = await newContact(tenant);
    const created = await call(t.app, tenant, 'POST', `/contacts/${contact.id}/followups`, { title: 'Send quote', due_at: '2030-01-02T10:00:00Z', notes: 'pricing v2' });
    expect(created.statusCode).toBe(201);
    const followup = created.json();
    expect(Object.keys(followup).sort()).toEqual(['contact_id', 'created_at', 'done', 'due_at', 'id', 'notes', 'title', 'updated_at']);
    expect(followup).toMatchObject({ contact_id: contact.id, title: 'Send quote', due_at: '2030-01-02T10:00:00.000Z', done: false, notes: 'pricing v2', updated_at: null });
    await call(t.app, tenant, 'POST', `/contacts/${contact.id}/followups`, { title: 'Earlier', due_at: '2029-05-01T00:00:00Z' });

    const list = (await call(t.app, tenant, 'GET', `/contacts/${contact.id}/followups`)).json();
    expect(list.data.map((f: { title: string }) => f.title)).toEqual(['Earlier', 'Send quote']);

    const patched = await call(t.app, tenant, 'PATCH', `/contacts/${contact.id}/followups/${followup.id}`, { done: true, notes: null });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ done: true, notes: null, title: 'Send quote' });
    expect(patched.json().updated_at).not.toBeNull();
    // A patch that changes nothing emits nothing.
    expect(patched.json().notes).toBeNull();
    await call(t.app, tenant, 'PATCH', `/contacts/${contact.id}/followups/${followup.id}`, { done: true, due_at: '2030-01-02T10:00:00.000Z' });

    const deleted = await call(t.app, tenant, 'DELETE', `/contacts/${contact.id}/followups/${followup.id}`);
    expect(deleted.statusCode).toBe(200);
    expect(Object.keys(deleted.json())).toEqual(['message']);
    expect((await call(t.app, tenant, 'DELETE', `/contacts/${contact.id}/followups/${followup.id}`)).statusCode).toBe(404);

    expect((await eventsOf(tenant.id, 'followup.created')).map((e) => (e.data as { title: string }).title)).toEqual(['Send quote', 'Earlier']);
    const updates = await eventsOf(tenant.id, 'followup.updated');
    expect(updates).toHaveLength(1);
    expect(updates[0].data).toEqual(patched.json());
    const [del] = await eventsOf(tenant.id, 'followup.deleted');
    expect(del.data).toMatchObject({ id: followup.id, contact_id: contact.id, done: true });
  });

  it('rejects bad follow-ups with 400', async () => {
    const tenant = await createTenant(t.app);
    const contact = await newContact(tenant);
    for (const body of [{ due_at: '2030-01-01T00:00:00Z' }, { title: 'x' }, { title: '', due_at: '2030-01-01T00:00:00Z' }, { title: 'x', due_at: 'tomorrow' }, { title: 'x', due_at: '2030-01-01T00:00:00Z', done: 'maybe' }]) {
      const res = await call(t.app, tenant, 'POST', `/contacts/${contact.id}/followups`, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
    }
    const f = (await call(t.app, tenant, 'POST', `/contacts/${contact.id}/followups`, { title: 'ok', due_at: '2030-01-01T00:00:00Z' })).json();
    for (const body of [{ title: null }, { due_at: null }, { due_at: 'soon' }, { title: '' }]) {
      expect((await call(t.app, tenant, 'PATCH', `/contacts/${contact.id}/followups/${f.id}`, body)).statusCode, JSON.stringify(body)).toBe(400);
    }
    expect((await call(t.app, tenant, 'PATCH', `/contacts/${contact.id}/followups/nope`, { done: true })).statusCode).toBe(404);
  });

  it('lists communications written by the messaging code, paginated', async () => {
    const tenant = await createTenant(t.app);
    const contact = await newContact(tenant);
    await t.deps.db.transaction().execute(async (tx) => {
      await addCommunication(tx, tenant.id, { contactId: contact.id, direction: 'outbound', messageId: 'wamid.1', summary: 'template hello' });
      await addCommunication(tx, tenant.id, { contactId: contact.id, direction: 'inbound', messageId: 'wamid.2', summary: 'hi back' });
    });
    const res = await call(t.app, tenant, 'GET', `/contacts/${contact.id}/communications`);
    expect(res.statusCode).toBe(200);
    expect(res.json().pagination).toMatchObject({ total_items: 2 });
    expect(res.json().data.map((c: { message_id: string }) => c.message_id).sort()).toEqual(['wamid.1', 'wamid.2']);
    expect(res.json().data[0]).toMatchObject({ contact_id: contact.id, channel: 'whatsapp' });
    expect(await eventsOf(tenant.id, 'contact.communication_added')).toHaveLength(2);
  });

  it('isolates tenants and checks scopes', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const contact = await newContact(a);
    const f = (await call(t.app, a, 'POST', `/contacts/${contact.id}/followups`, { title: 'mine', due_at: '2030-01-01T00:00:00Z' })).json();
    await call(t.app, a, 'POST', `/contacts/${contact.id}/notes`, { content: 'mine' });
    for (const [method, path, body] of [
      ['GET', `/contacts/${contact.id}/notes`], ['POST', `/contacts/${contact.id}/notes`, { content: 'x' }], ['GET', `/contacts/${contact.id}/communications`],
      ['GET', `/contacts/${contact.id}/followups`], ['POST', `/contacts/${contact.id}/followups`, { title: 'x', due_at: '2030-01-01T00:00:00Z' }],
      ['PATCH', `/contacts/${contact.id}/followups/${f.id}`, { done: true }], ['DELETE', `/contacts/${contact.id}/followups/${f.id}`],
    ] as [string, string, unknown?][]) {
      const res = await call(t.app, b, method, path, body);
      expect(res.statusCode, `${method} ${path}`).toBe(404);
    }
    // B's own contact cannot reach A's follow-up either.
    const other = await newContact(b);
    expect((await call(t.app, b, 'PATCH', `/contacts/${other.id}/followups/${f.id}`, { done: true })).statusCode).toBe(404);
    expect((await call(t.app, a, 'GET', `/contacts/${contact.id}/followups`)).json().data[0]).toMatchObject({ id: f.id, done: false });

    // Keys that are not follow-up fields are dropped: a body cannot move a follow-up to another tenant or contact.
    const smuggled = await call(t.app, b, 'POST', `/contacts/${other.id}/followups`, {
      title: 'smuggled', due_at: '2030-01-01T00:00:00Z', tenant_id: a.id, contact_id: contact.id, id: f.id, created_at: '2000-01-01T00:00:00Z',
    });
    expect(smuggled.statusCode).toBe(201);
    expect(smuggled.json()).toMatchObject({ contact_id: other.id, title: 'smuggled' });
    expect(smuggled.json().id).not.toBe(f.id);
    const moved = await call(t.app, b, 'PATCH', `/contacts/${other.id}/followups/${smuggled.json().id}`, { tenant_id: a.id, contact_id: contact.id, bogus: 1 });
    expect(moved.statusCode).toBe(200);
    expect(moved.json()).toEqual(smuggled.json()); // nothing changed
    const rows = await t.deps.db.selectFrom('contact_followups').select(['tenant_id', 'contact_id']).where('id', '=', smuggled.json().id).execute();
    expect(rows).toEqual([{ tenant_id: b.id, contact_id: other.id }]);
    expect((await call(t.app, a, 'GET', `/contacts/${contact.id}/followups`)).json().data).toHaveLength(1);

    const reader = await createTenant(t.app, { scopes: ['contacts:read'] });
    const own = await t.deps.db.selectFrom('contacts').select('id').where('tenant_id', '=', a.id).executeTakeFirstOrThrow();
    const denied = await call(t.app, reader, 'POST', `/contacts/${own.id}/notes`, { content: 'x' });
    expect(denied.statusCode).toBe(403);
    expect(denied.json().error.required_permissions).toEqual(['contacts:write']);
  });
});
