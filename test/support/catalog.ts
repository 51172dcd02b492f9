// The catalog facts of schemas app and api (and policies anywhere), by name only (no OIDs), so
// that two databases built by different tools can be compared: test/supabase-cli.test.ts
// (`supabase db push` vs our migrator) and test/schema.test.ts (migrations vs supabase/schemas).
import type { Sql } from 'postgres'

/**
 * Everything the migrations decide about schemas app and api, by name only (no OIDs), so that
 * two databases built by different tools can be compared.
 */
export async function fingerprint(sql: Sql) {
  const schemas = ['app', 'api']
  return {
    schemas: await sql`
      select n.nspname as schema, pg_get_userbyid(n.nspowner) as owner, n.nspacl::text[] as acl
        from pg_namespace n
       where n.nspname = any (${schemas})
       order by 1`,
    relations: await sql`
      select n.nspname as schema, c.relname as name, c.relkind::text as kind,
             c.relrowsecurity as rls, c.relforcerowsecurity as force_rls,
             c.relacl::text[] as acl, obj_description(c.oid, 'pg_class') as comment
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any (${schemas}) and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
       order by 1, 2`,
    columns: await sql`
      select n.nspname as schema, c.relname as table, a.attname as column,
             format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as not_null,
             pg_get_expr(d.adbin, d.adrelid) as default, a.attgenerated::text as generated,
             a.attidentity::text as identity, a.attacl::text[] as acl
        from pg_attribute a
        join pg_class c on c.oid = a.attrelid
        join pg_namespace n on n.oid = c.relnamespace
        left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
       where n.nspname = any (${schemas}) and c.relkind in ('r', 'p', 'v', 'm', 'f')
         and a.attnum > 0 and not a.attisdropped
       order by 1, 2, a.attnum`,
    constraints: await sql`
      select n.nspname as schema, c.relname as table, k.conname as name, pg_get_constraintdef(k.oid) as definition
        from pg_constraint k
        join pg_class c on c.oid = k.conrelid
        join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any (${schemas})
       order by 1, 2, 3`,
    indexes: await sql`
      select schemaname as schema, tablename as table, indexname as name, indexdef as definition
        from pg_indexes where schemaname = any (${schemas})
       order by 1, 2, 3`,
    triggers: await sql`
      select n.nspname as schema, c.relname as table, t.tgname as name, pg_get_triggerdef(t.oid) as definition,
             t.tgenabled::text as enabled
        from pg_trigger t
        join pg_class c on c.oid = t.tgrelid
        join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any (${schemas}) and not t.tgisinternal
       order by 1, 2, 3`,
    functions: await sql`
      select n.nspname as schema, p.proname as name,
             pg_get_function_identity_arguments(p.oid) as arguments,
             pg_get_function_result(p.oid) as result, p.prokind::text as kind,
             l.lanname as language, p.provolatile::text as volatility, p.prosecdef as security_definer,
             p.proconfig as config, p.proacl::text[] as acl, md5(p.prosrc) as body_md5,
             p.prorows::int as rows, p.proparallel::text as parallel, obj_description(p.oid, 'pg_proc') as comment
        from pg_proc p
        join pg_namespace n on n.oid = p.pronamespace
        join pg_language l on l.oid = p.prolang
       where n.nspname = any (${schemas})
       order by 1, 2, 3`,
    types: await sql`
      select n.nspname as schema, t.typname as name, t.typtype::text as kind,
             coalesce((select array_agg(e.enumlabel order by e.enumsortorder) from pg_enum e where e.enumtypid = t.oid),
                      '{}') as labels
        from pg_type t join pg_namespace n on n.oid = t.typnamespace
       where n.nspname = any (${schemas}) and t.typtype in ('e', 'd', 'c')
         and not exists (select 1 from pg_class c where c.oid = t.typrelid and c.relkind <> 'c')
       order by 1, 2`,
    // Policies anywhere outside the system schemas: migrations may add some to realtime.messages.
    policies: await sql`
      select schemaname as schema, tablename as table, policyname as name, permissive, roles::text[] as roles,
             cmd, qual, with_check
        from pg_policies
       where schemaname not in ('pg_catalog', 'information_schema')
       order by 1, 2, 3`,
    defaultPrivileges: await sql`
      select pg_get_userbyid(d.defaclrole) as role, n.nspname as schema, d.defaclobjtype::text as type,
             d.defaclacl::text[] as acl
        from pg_default_acl d left join pg_namespace n on n.oid = d.defaclnamespace
       order by 1, 2, 3`,
    publications: await sql`
      select p.pubname as name, pt.schemaname as schema, pt.tablename as table
        from pg_publication p left join pg_publication_tables pt on pt.pubname = p.pubname
       order by 1, 2, 3`,
  }
}

